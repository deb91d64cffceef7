//! A bounded scanner over an answer as it streams: it sees each chunk as it passes (the chunk is
//! forwarded untouched and at once) and keeps at most one `data:` line (SSE) or the whole body
//! up to [`MAX_EVENT_LINE`] (a JSON side-call answer), to find the usage the provider reports.

use crate::provider::{Provider, TokenUsage, UsageTally};

/// Longest `data:` line (or JSON answer) the scanner holds (the final `response.completed` event
/// repeats the whole output, so this is generous; a longer line is skipped and the usage counts
/// as missing unless a later event completes it).
pub const MAX_EVENT_LINE: usize = 8 * 1_048_576;

/// Scans SSE bytes for the provider's usage events.
#[derive(Debug, Default)]
pub struct UsageScanner {
    line: Vec<u8>,
    overflow: bool,
    tally: UsageTally,
    /// A non-streamed JSON answer: the whole body is one value, read at the end.
    json: bool,
}

impl UsageScanner {
    /// A scanner of one non-streamed JSON answer (its usage is read by
    /// [`Provider::answer_usage`] once [`UsageScanner::finish`] is called).
    #[must_use]
    pub fn json() -> Self {
        Self {
            json: true,
            ..Self::default()
        }
    }

    /// Feeds the next chunk of the stream.
    pub fn feed(&mut self, provider: &dyn Provider, chunk: &[u8]) {
        if self.json {
            if !self.overflow {
                if self.line.len() + chunk.len() > MAX_EVENT_LINE {
                    self.overflow = true;
                    self.line = Vec::new();
                } else {
                    self.line.extend_from_slice(chunk);
                }
            }
            return;
        }
        for part in chunk.split_inclusive(|&b| b == b'\n') {
            let ends = part.last() == Some(&b'\n');
            if !self.overflow {
                if self.line.len() + part.len() > MAX_EVENT_LINE {
                    self.overflow = true;
                    self.line.clear();
                } else {
                    self.line.extend_from_slice(part);
                }
            }
            if ends {
                if !self.overflow {
                    self.line_done(provider);
                }
                self.line.clear();
                self.overflow = false;
            }
        }
    }

    /// Ends a JSON answer: reads its usage (an SSE scan needs no end).
    pub fn finish(&mut self, provider: &dyn Provider) {
        if self.json && !self.overflow {
            if let Ok(value) = serde_json::from_slice::<serde_json::Value>(&self.line) {
                self.tally.complete = provider.answer_usage(&value);
            }
            self.line = Vec::new();
        }
    }

    fn line_done(&mut self, provider: &dyn Provider) {
        let line = self.line.trim_ascii_end();
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.trim_ascii_start();
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) {
            provider.usage(&value, &mut self.tally);
        }
    }

    /// The usage found, once complete.
    #[must_use]
    pub fn usage(&self) -> Option<TokenUsage> {
        self.tally.complete
    }
}
