//! The stdio transport with the server's request budget.
//!
//! rmcp reads the next message as soon as the previous one is dispatched and spawns a task per
//! request, so a client that pipelines requests and never reads stdout would make the server
//! queue requests and responses without end. This transport sits between rmcp and the byte
//! stream and bounds both:
//!
//! * every line is read with a cap of [`MAX_REQUEST_BYTES`] before anything decodes it; a longer
//!   line is discarded unparsed (its arguments are never materialised) and refused with JSON-RPC
//!   `-32600` (id `null`); a line that is not JSON is refused with `-32700`, JSON that is not a
//!   message with `-32600` (with its id when it has one);
//! * at most [`MAX_IN_FLIGHT_REQUESTS`] requests (and refusals) are between "read" and "answer
//!   written". When they are all taken, the transport stops reading stdin (backpressure) until an
//!   answer has been written out; a client that does not read its answers stops the server from
//!   reading, it never makes it buffer;
//! * a request that reuses the id of a request still in flight is refused with `-32600`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use rmcp::RoleServer;
use rmcp::model::{ClientNotification, ErrorData, JsonRpcMessage, RequestId};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt as _, AsyncRead, AsyncWrite, AsyncWriteExt as _, BufReader};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Largest JSON-RPC line accepted (tool arguments are a path or a digest; `initialize` is small).
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
/// Most requests read but not yet answered (running, waiting for a tool slot, or with an answer
/// waiting for stdout). Reading stops while all are taken.
pub const MAX_IN_FLIGHT_REQUESTS: usize = 8;

type Pending = Arc<Mutex<HashMap<RequestId, OwnedSemaphorePermit>>>;

/// The bounded server transport over any byte stream pair (stdin/stdout in the binary).
pub struct BoundedTransport<R: AsyncRead, W: AsyncWrite> {
    read: BufReader<R>,
    line: Vec<u8>,
    discarding: bool,
    writer: LineWriter<W>,
    slots: Arc<Semaphore>,
    reserved: Option<OwnedSemaphorePermit>,
    pending: Pending,
}

/// One bounded line read.
enum LineRead {
    Line,
    Oversized,
    Eof,
}

impl<R, W> BoundedTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// Wraps a reader and a writer.
    #[must_use]
    pub fn new(read: R, write: W) -> Self {
        Self {
            read: BufReader::new(read),
            line: Vec::new(),
            discarding: false,
            writer: LineWriter {
                out: Arc::new(tokio::sync::Mutex::new(write)),
            },
            slots: Arc::new(Semaphore::new(MAX_IN_FLIGHT_REQUESTS)),
            reserved: None,
            pending: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Reads one `\n`-terminated line into `self.line`, never holding more than
    /// [`MAX_REQUEST_BYTES`]. Cancellation-safe: a partial line stays in `self.line` and the
    /// bytes taken from the reader are exactly those appended (or discarded).
    async fn read_line(&mut self) -> std::io::Result<LineRead> {
        loop {
            let available = self.read.fill_buf().await?;
            if available.is_empty() {
                return Ok(LineRead::Eof);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let take = newline.map_or(available.len(), |i| i.saturating_add(1));
            let chunk = available.get(..take).unwrap_or_default();
            let mut result = None;
            if self.discarding {
                if newline.is_some() {
                    self.discarding = false;
                }
            } else if self.line.len().saturating_add(take) > MAX_REQUEST_BYTES.saturating_add(1) {
                self.line.clear();
                self.discarding = newline.is_none();
                result = Some(LineRead::Oversized);
            } else {
                self.line.extend_from_slice(chunk);
                if newline.is_some() {
                    result = Some(LineRead::Line);
                }
            }
            self.read.consume(take);
            if let Some(result) = result {
                return Ok(result);
            }
        }
    }

    /// Writes a refusal in the background; it holds the reserved slot until it is written.
    fn refuse(&mut self, error: ErrorData, id: Option<RequestId>) {
        let send = self.writer.send(JsonRpcMessage::error(error, id));
        let permit = self.reserved.take();
        tokio::spawn(async move {
            let _ = send.await;
            drop(permit);
        });
    }

    /// Decodes one line; `None` when it is refused or ignored.
    fn decode(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let line = self.line.strip_suffix(b"\n").unwrap_or(&self.line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let line = line
            .strip_prefix(b"\xEF\xBB\xBF".as_slice())
            .unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleServer>>(line) {
            Ok(message) => Some(message),
            Err(_) => {
                let refusal = match serde_json::from_slice::<serde_json::Value>(line) {
                    Err(_) => Some((ErrorData::parse_error("line is not JSON", None), None)),
                    Ok(value) => match value.get("id") {
                        // A notification rmcp does not know: ignored, as the MCP SDKs do.
                        None if value.get("method").is_some() => None,
                        id => Some((
                            ErrorData::invalid_request("not a valid JSON-RPC message", None),
                            id.and_then(|id| serde_json::from_value(id.clone()).ok()),
                        )),
                    },
                };
                if let Some((error, id)) = refusal {
                    self.refuse(error, id);
                }
                None
            }
        }
    }
}
impl<R: AsyncRead, W: AsyncWrite> std::fmt::Debug for BoundedTransport<R, W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedTransport")
            .field("free_slots", &self.slots.available_permits())
            .finish_non_exhaustive()
    }
}

/// Writes each message as one JSON line. JSON-RPC 2.0 requires `"id": null` in an error whose
/// request id could not be read; rmcp's error type omits the member then, so it is added here.
struct LineWriter<W> {
    out: Arc<tokio::sync::Mutex<W>>,
}

impl<W: AsyncWrite + Send + Unpin + 'static> LineWriter<W> {
    fn send(
        &self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = std::io::Result<()>> + Send + 'static {
        let line = encode_line(&item);
        let out = Arc::clone(&self.out);
        async move {
            let line = line?;
            let mut out = out.lock().await;
            out.write_all(&line).await?;
            out.flush().await
        }
    }

    async fn close(&self) -> std::io::Result<()> {
        self.out.lock().await.shutdown().await
    }
}

/// One message as a JSON line, with `"id": null` in an error without a readable id.
fn encode_line(item: &TxJsonRpcMessage<RoleServer>) -> std::io::Result<Vec<u8>> {
    let mut line = match item {
        JsonRpcMessage::Error(error) if error.id.is_none() => {
            let mut value = serde_json::to_value(item).map_err(std::io::Error::other)?;
            if let Some(object) = value.as_object_mut() {
                object.insert("id".to_owned(), serde_json::Value::Null);
            }
            serde_json::to_vec(&value)
        }
        _ => serde_json::to_vec(item),
    }
    .map_err(std::io::Error::other)?;
    line.push(b'\n');
    Ok(line)
}

fn release(pending: &Pending, id: &RequestId) {
    let permit = pending
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .remove(id);
    drop(permit);
}

impl<R, W> Transport<RoleServer> for BoundedTransport<R, W>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let answered = match &item {
            JsonRpcMessage::Response(r) => Some(r.id.clone()),
            JsonRpcMessage::Error(e) => e.id.clone(),
            JsonRpcMessage::Request(_) | JsonRpcMessage::Notification(_) => None,
        };
        let send = self.writer.send(item);
        let pending = Arc::clone(&self.pending);
        async move {
            let sent = send.await;
            // The slot is free once the answer has left (or failed to leave) the process.
            if let Some(id) = answered {
                release(&pending, &id);
            }
            sent
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if self.reserved.is_none() {
                // Cancellation-safe: dropping this wait holds nothing.
                self.reserved = Some(Arc::clone(&self.slots).acquire_owned().await.ok()?);
            }
            match self.read_line().await {
                Ok(LineRead::Line) => {}
                Ok(LineRead::Oversized) => {
                    self.refuse(
                        ErrorData::invalid_request("request line exceeds the size limit", None),
                        None,
                    );
                    continue;
                }
                Ok(LineRead::Eof) | Err(_) => return None,
            }
            let message = self.decode();
            self.line.clear();
            let Some(message) = message else { continue };
            match &message {
                JsonRpcMessage::Request(request) => {
                    let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                    if pending.contains_key(&request.id) {
                        drop(pending);
                        let id = request.id.clone();
                        self.refuse(
                            ErrorData::invalid_request("request id is already in flight", None),
                            Some(id),
                        );
                        continue;
                    }
                    if let Some(permit) = self.reserved.take() {
                        pending.insert(request.id.clone(), permit);
                    }
                }
                JsonRpcMessage::Notification(notification) => {
                    // A cancelled request is never answered: its slot is free now (its tool
                    // body, if running, still holds a tool slot until it ends).
                    if let ClientNotification::CancelledNotification(cancelled) =
                        &notification.notification
                        && let Some(id) = &cancelled.params.request_id
                    {
                        release(&self.pending, id);
                    }
                }
                JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_) => {}
            }
            return Some(message);
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        self.writer.close().await
    }
}
