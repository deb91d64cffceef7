//! A bounded scanner over a streamed SSE answer: it sees each chunk as it passes (the chunk is
//! forwarded untouched and at once) and keeps at most one `data:` line, to find the usage event.

use crate::provider::{Provider, TokenUsage};

/// Longest `data:` line the scanner holds (the final `response.completed` event repeats the whole
/// output, so this is generous; a longer line is skipped and the usage counts as missing).
pub const MAX_EVENT_LINE: usize = 8 * 1_048_576;

/// Scans SSE bytes for the provider's usage event.
#[derive(Debug, Default)]
pub struct UsageScanner {
    line: Vec<u8>,
    overflow: bool,
    usage: Option<TokenUsage>,
}

impl UsageScanner {
    /// Feeds the next chunk of the stream.
    pub fn feed(&mut self, provider: &dyn Provider, chunk: &[u8]) {
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

    fn line_done(&mut self, provider: &dyn Provider) {
        let line = self.line.trim_ascii_end();
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let data = data.trim_ascii_start();
        if let Ok(value) = serde_json::from_slice::<serde_json::Value>(data)
            && let Some(usage) = provider.usage(&value)
        {
            self.usage = Some(usage);
        }
    }

    /// The usage found, if any.
    #[must_use]
    pub fn usage(&self) -> Option<TokenUsage> {
        self.usage
    }
}
