//! Waking idle runners when work may be available: a version counter bumped after every write
//! that makes a job claimable (submit, retry, a requeue, a retrying failure, a rescue). On
//! PostgreSQL the bump travels between hosts as `NOTIFY patch_candidate_jobs`, received by one
//! `LISTEN` connection per store (started on the first [`crate::JobStore::work_signal`],
//! reconnecting by itself). On SQLite it reaches the handles of the same process only.
//!
//! A wake-up is a hint, never a promise: a job snoozed or backing off becomes due without any
//! notification, so a runner still claims on its poll interval.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_postgres::{AsyncMessage, NoTls};

/// The notification channel on PostgreSQL.
pub(crate) const CHANNEL: &str = "patch_candidate_jobs";

#[derive(Debug)]
pub(crate) struct Wake {
    tx: watch::Sender<u64>,
    listener: OnceLock<()>,
}

impl Wake {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            tx: watch::Sender::new(0),
            listener: OnceLock::new(),
        })
    }

    pub(crate) fn bump(&self) {
        self.tx.send_modify(|v| *v = v.wrapping_add(1));
    }

    pub(crate) fn subscribe(&self) -> WorkSignal {
        let mut rx = self.tx.subscribe();
        rx.mark_unchanged();
        WorkSignal { rx }
    }

    /// Starts the PostgreSQL listener once per store (all clones share it).
    pub(crate) fn ensure_listener(self: &Arc<Self>, config: &tokio_postgres::Config) {
        self.listener.get_or_init(|| {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(listen(config.clone(), Arc::downgrade(self)));
            }
        });
    }
}

/// A subscription to wake-ups; see [`crate::JobStore::work_signal`].
#[derive(Debug)]
pub struct WorkSignal {
    rx: watch::Receiver<u64>,
}

impl WorkSignal {
    /// Waits until work may have become available since the signal was created or last
    /// returned `true`, or until `timeout`. `false` on timeout.
    pub async fn wait(&mut self, timeout: Duration) -> bool {
        match tokio::time::timeout(timeout, self.rx.changed()).await {
            Ok(Ok(())) => {
                self.rx.mark_unchanged();
                true
            }
            Ok(Err(_)) => {
                // Every store handle is gone: nothing will ever wake us; behave as a timeout.
                tokio::time::sleep(timeout).await;
                false
            }
            Err(_) => false,
        }
    }
}

/// The listener: one connection doing `LISTEN`, each notification a bump. Reconnects every
/// second while the database is away; a (re)connect bumps once, since notifications sent while
/// it was away are lost. Ends when every store handle is dropped.
async fn listen(config: tokio_postgres::Config, wake: Weak<Wake>) {
    loop {
        if wake.strong_count() == 0 {
            return;
        }
        if let Ok((client, mut connection)) = config.connect(NoTls).await {
            let (ntx, mut nrx) = tokio::sync::mpsc::unbounded_channel::<()>();
            let driver = tokio::spawn(async move {
                while let Some(Ok(message)) =
                    std::future::poll_fn(|cx| connection.poll_message(cx)).await
                {
                    if matches!(message, AsyncMessage::Notification(_)) && ntx.send(()).is_err() {
                        return;
                    }
                }
            });
            if client
                .batch_execute(&format!("LISTEN {CHANNEL}"))
                .await
                .is_ok()
            {
                tracing::debug!("job store: listening for new work");
                if let Some(w) = wake.upgrade() {
                    w.bump();
                }
                loop {
                    tokio::select! {
                        got = nrx.recv() => match (got, wake.upgrade()) {
                            (Some(()), Some(w)) => w.bump(),
                            (None, _) => break,
                            (_, None) => {
                                driver.abort();
                                return;
                            }
                        },
                        () = tokio::time::sleep(Duration::from_secs(1)) => {
                            if wake.strong_count() == 0 {
                                driver.abort();
                                return;
                            }
                        }
                    }
                }
            }
            driver.abort();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
