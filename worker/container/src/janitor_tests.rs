#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::{BTreeMap, HashMap};

use pretty_assertions::assert_eq;

use super::*;
use crate::owner::{
    ATTEMPT_LABEL_KEY, INSTANCE_LABEL_KEY, JobBinding, SERVICE_HOST_LABEL_KEY, generate_attempt_id,
};
use crate::testkit::FakeRuntime;

const HOST: &str = "0123456789abcdef0123456789abcdef";
const OTHER_HOST: &str = "fedcba9876543210fedcba9876543210";
const NS: u64 = 4_026_531_836;
const NOW: i64 = 1_800_000_000;
const GRACE: Duration = Duration::from_secs(600);
const STORE: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";
const OTHER_STORE: &str = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0";

fn store(id: &str) -> StoreId {
    StoreId::parse(id).unwrap()
}

/// A process table that answers from a fixed map (anything else is `Unknown`).
struct Table(BTreeMap<String, Liveness>);

impl ProcessTable for Table {
    fn liveness(&self, owner: ProcessIdentity) -> Liveness {
        let key = format!("{}", owner.pid());
        self.0.get(&key).copied().unwrap_or(Liveness::Unknown)
    }
}

fn table() -> Table {
    Table(BTreeMap::from([
        ("100".to_owned(), Liveness::Alive),
        ("200".to_owned(), Liveness::Gone),
    ]))
}

fn me() -> LocalOwner {
    LocalOwner::synthetic(HOST, Some(NS), Some((1, 1)))
}

fn container(labels: &[(&str, String)]) -> TurnContainer {
    let name = ContainerName::generate();
    TurnContainer {
        id: name.as_str().to_owned(),
        names: vec![format!("/{name}")],
        created: NOW - 30,
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect::<HashMap<_, _>>(),
    }
}

/// The labels a turn of `host`/`ns`/`owner` with `deadline` carries.
fn turn(host: &str, ns: &str, owner: &str, deadline: i64) -> TurnContainer {
    container(&[
        (HOST_LABEL_KEY, host.to_owned()),
        (PID_NAMESPACE_LABEL_KEY, ns.to_owned()),
        (OWNER_LABEL_KEY, owner.to_owned()),
        (INSTANCE_LABEL_KEY, "a".repeat(32)),
        (ATTEMPT_LABEL_KEY, generate_attempt_id().as_str().to_owned()),
        (DEADLINE_LABEL_KEY, deadline.to_string()),
    ])
}

fn judge(c: &TurnContainer) -> Verdict {
    verdict(c, NOW, GRACE, &me(), &table())
}

/// The name a turn goes by (its generated name without the leading `/`).
fn name_of(c: &TurnContainer) -> String {
    c.names[0].trim_start_matches('/').to_owned()
}

/// A fake runtime listing `turns`, in this order.
fn fake_listing(turns: &[&TurnContainer]) -> FakeRuntime {
    let mut fake = FakeRuntime::new(b"");
    fake.turns = turns.iter().map(|&c| c.clone()).collect();
    fake
}

/// The calls of a pass that lists and then removes `removed`, in this order.
fn list_then_remove(removed: &[&TurnContainer]) -> Vec<String> {
    std::iter::once("list".to_owned())
        .chain(removed.iter().map(|c| format!("remove:{}", name_of(c))))
        .collect()
}

/// The job turns of `store` on `fake`, and their names.
async fn list_store(fake: &FakeRuntime, store_id: &str) -> (Vec<JobTurn>, Vec<String>) {
    let listed = list_job_turns(fake, &store(store_id)).await.unwrap();
    let names = listed.iter().map(|t| t.name.as_str().to_owned()).collect();
    (listed, names)
}

#[test]
fn a_live_turn_is_kept_until_its_deadline_plus_grace_whoever_owns_it() {
    let ns = NS.to_string();
    let other_ns = (NS + 1).to_string();
    for (host, ns) in [(HOST, &ns), (OTHER_HOST, &ns), (HOST, &other_ns)] {
        // Alive, or gone in a namespace / on a host where that proves nothing.
        for owner in ["100:5", "200:5", "300:5"] {
            let deadline = NOW - 600; // deadline + grace == now: not yet passed
            let c = turn(host, ns, owner, deadline);
            let expected = if host == HOST && *ns == NS.to_string() && owner == "200:5" {
                Verdict::RemoveOwnerGone
            } else {
                Verdict::KeepLive
            };
            assert_eq!(judge(&c), expected, "{host} {ns} {owner}");
            // One second later every owner's turn is over.
            assert_eq!(
                verdict(&c, NOW + 1, GRACE, &me(), &table()),
                Verdict::RemoveExpired,
                "{host} {ns} {owner}"
            );
        }
    }
}

#[test]
fn owner_gone_is_proven_only_on_this_host_in_this_namespace() {
    let far = NOW + 3600;
    let ns = NS.to_string();
    assert_eq!(
        judge(&turn(HOST, &ns, "200:5", far)),
        Verdict::RemoveOwnerGone
    );
    assert_eq!(judge(&turn(HOST, &ns, "100:5", far)), Verdict::KeepLive);
    // Unknown liveness (unreadable /proc, hidepid, ...) never counts as gone.
    assert_eq!(judge(&turn(HOST, &ns, "300:5", far)), Verdict::KeepLive);
    assert_eq!(
        judge(&turn(OTHER_HOST, &ns, "200:5", far)),
        Verdict::KeepLive
    );
    assert_eq!(
        judge(&turn(HOST, &(NS + 1).to_string(), "200:5", far)),
        Verdict::KeepLive
    );
    for bad_ns in ["unknown", "", "0", "04026531836"] {
        assert_eq!(
            judge(&turn(HOST, bad_ns, "200:5", far)),
            Verdict::KeepLive,
            "{bad_ns:?}"
        );
    }
    for bad_owner in ["unknown", "200", "200:0", "200:x", ""] {
        assert_eq!(
            judge(&turn(HOST, &ns, bad_owner, far)),
            Verdict::KeepLive,
            "{bad_owner:?}"
        );
    }
    // A sweeper that cannot read its own PID namespace proves nothing either.
    let blind = LocalOwner::synthetic(HOST, None, None);
    assert_eq!(
        verdict(&turn(HOST, &ns, "200:5", far), NOW, GRACE, &blind, &table()),
        Verdict::KeepLive
    );
}

#[test]
fn containers_without_a_deadline_get_the_longest_possible_life() {
    let legacy = i64::try_from(LEGACY_LIFETIME.as_secs()).unwrap();
    let grace = i64::try_from(GRACE.as_secs()).unwrap();
    let mut c = container(&[(OWNER_LABEL_KEY, "200:5".to_owned())]);
    c.created = NOW - legacy - grace;
    assert_eq!(judge(&c), Verdict::KeepLive);
    c.created -= 1;
    assert_eq!(judge(&c), Verdict::RemoveExpired);
    // A malformed deadline is no deadline.
    for bad in ["", "-5", "+5", "1e3", " 5", "99999999999999999999"] {
        let mut c = turn(HOST, "unknown", "unknown", 0);
        c.labels
            .insert(DEADLINE_LABEL_KEY.to_owned(), bad.to_owned());
        assert_eq!(judge(&c), Verdict::KeepLive, "{bad:?}");
    }
    assert!(LEGACY_LIFETIME.as_secs() > MAX_WALL_SECONDS);
}

#[test]
fn containers_without_a_generated_name_are_never_touched() {
    let mut c = turn(HOST, &NS.to_string(), "200:5", 0);
    c.names = vec!["/someone-else".to_owned()];
    assert_eq!(judge(&c), Verdict::KeepForeign);
}

#[tokio::test]
async fn sweep_removes_exactly_the_abandoned_turns() {
    let ns = NS.to_string();
    let expired = turn(OTHER_HOST, "1", "100:5", NOW - 601);
    let gone = turn(HOST, &ns, "200:5", NOW + 60);
    let live_here = turn(HOST, &ns, "100:5", NOW + 60);
    let live_elsewhere = turn(OTHER_HOST, &ns, "200:5", NOW + 60);
    let mut foreign = turn(HOST, &ns, "200:5", 0);
    foreign.names = vec!["/other".to_owned()];
    let fake = fake_listing(&[&expired, &gone, &live_here, &live_elsewhere, &foreign]);
    let report = sweep_with(&fake, GRACE, NOW, &me(), &table())
        .await
        .unwrap();
    assert_eq!(report.removed, vec![name_of(&expired), name_of(&gone)]);
    assert_eq!(
        report.kept,
        vec![
            name_of(&live_here),
            name_of(&live_elsewhere),
            foreign.id.clone()
        ]
    );
    assert_eq!(fake.calls(), list_then_remove(&[&expired, &gone]));
}

/// A service turn of job store `store` (`None`: no store label), on another host.
fn job_turn(store: Option<&str>, job: &str, attempt: &str) -> TurnContainer {
    let mut c = turn(OTHER_HOST, &NS.to_string(), "100:5", NOW + 60);
    c.labels.insert(JOB_LABEL_KEY.to_owned(), job.to_owned());
    c.labels
        .insert(JOB_ATTEMPT_LABEL_KEY.to_owned(), attempt.to_owned());
    if let Some(store) = store {
        c.labels
            .insert(JOB_STORE_LABEL_KEY.to_owned(), store.to_owned());
    }
    c
}

#[tokio::test]
async fn superseded_job_turns_are_removed_and_current_ones_kept() {
    let current = job_turn(Some(STORE), "job-a", "att-1");
    let superseded = job_turn(Some(STORE), "job-a", "att-0");
    let finished = job_turn(Some(STORE), "job-b", "att-9");
    let plain = turn(HOST, &NS.to_string(), "100:5", NOW + 60);
    let fake = fake_listing(&[&current, &superseded, &plain, &finished]);
    let (listed, names) = list_store(&fake, STORE).await;
    assert_eq!(
        names,
        vec![name_of(&current), name_of(&superseded), name_of(&finished)]
    );
    let keep = std::collections::HashSet::from([("job-a".to_owned(), "att-1".to_owned())]);
    let report = remove_superseded_turns(&fake, listed, &keep).await;
    assert_eq!(
        report.removed,
        vec![name_of(&superseded), name_of(&finished)]
    );
    assert_eq!(report.kept, vec![name_of(&current)]);
    assert_eq!(fake.calls(), list_then_remove(&[&superseded, &finished]));
}

/// Two services with different job stores share one daemon: each store's running attempts never
/// contain the other's, so the pass must judge only its own store's containers.
#[tokio::test]
async fn r_janitor_removes_only_its_own_stores_superseded_turns() {
    // This store: one superseded turn (its attempt is over), one current.
    let own_superseded = job_turn(Some(STORE), "job-a", "att-0");
    let own_current = job_turn(Some(STORE), "job-a", "att-1");
    // Another store's live turn: not among this store's attempts, yet never removed here.
    let foreign = job_turn(Some(OTHER_STORE), "job-x", "att-7");
    // An older service's turn without a store label, and one with a malformed label.
    let unlabelled = job_turn(None, "job-y", "att-8");
    let malformed = job_turn(Some("../5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a"), "job-z", "att-9");
    let upper = job_turn(Some("5A5A5A5A5A5A5A5A5A5A5A5A5A5A5A5A"), "job-a", "att-0");
    let fake = fake_listing(&[
        &foreign,
        &own_superseded,
        &unlabelled,
        &own_current,
        &malformed,
        &upper,
    ]);

    let (listed, names) = list_store(&fake, STORE).await;
    assert_eq!(names, vec![name_of(&own_superseded), name_of(&own_current)]);
    let current = std::collections::HashSet::from([("job-a".to_owned(), "att-1".to_owned())]);
    let report = remove_superseded_turns(&fake, listed, &current).await;
    assert_eq!(report.removed, vec![name_of(&own_superseded)]);
    assert_eq!(report.kept, vec![name_of(&own_current)]);
    assert_eq!(fake.calls(), list_then_remove(&[&own_superseded]));

    // The other store's janitor, with nothing running, removes its own turn and nothing else.
    let listed = list_job_turns(&fake, &store(OTHER_STORE)).await.unwrap();
    assert_eq!(
        listed.iter().map(|t| t.job.as_str()).collect::<Vec<_>>(),
        vec!["job-x"]
    );
    let report = remove_superseded_turns(&fake, listed, &Default::default()).await;
    assert_eq!(report.removed, vec![name_of(&foreign)]);

    // The labelless and malformed ones are still there for the deadline / owner-gone sweep,
    // which keeps them while their deadline has not passed.
    for c in [&unlabelled, &malformed, &upper] {
        assert_eq!(judge(c), Verdict::KeepLive);
    }
}

#[test]
fn a_job_binding_labels_the_turn_with_its_store() {
    let binding = JobBinding::new(
        &store(STORE),
        "host-1",
        "job_0123456789abcdef0123456789abcdef",
        "0123456789abcdef0123456789abcdef",
    )
    .unwrap();
    assert_eq!(binding.store(), &store(STORE));
    let attempt = generate_attempt_id();
    let labels = me().turn_labels(&attempt, NOW).with_job(Some(&binding));
    let pairs: BTreeMap<&str, &str> = labels.pairs().collect();
    assert_eq!(pairs.get(JOB_STORE_LABEL_KEY), Some(&STORE));
    assert_eq!(pairs.get(SERVICE_HOST_LABEL_KEY), Some(&"host-1"));
    assert_eq!(
        pairs.get(JOB_LABEL_KEY),
        Some(&"job_0123456789abcdef0123456789abcdef")
    );
    assert_eq!(
        pairs.get(JOB_ATTEMPT_LABEL_KEY),
        Some(&"0123456789abcdef0123456789abcdef")
    );
    assert!(JobBinding::new(&store(STORE), "host/1", "job", "attempt").is_err());
}
