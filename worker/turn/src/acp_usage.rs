//! Token usage reported by the container (reference §11): parsed strictly, bounded, numeric only,
//! and never allowed to invalidate an otherwise valid patch.

use serde::Serialize;

/// Largest accepted token count in any field.
pub const MAX_USAGE_TOKENS: u64 = 10_000_000;

/// `IsolatedACPUsage`: three integers in `0..=10_000_000`, `total >= prompt + completion`,
/// `total > 0`. Built only through the crate's checked constructor (by the output contract's
/// scanner).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IsolatedAcpUsage {
    prompt_tokens: u64,
    completion_tokens: u64,
    total_tokens: u64,
}

impl IsolatedAcpUsage {
    /// The usage when the three counts satisfy every rule above, else `None`.
    #[must_use]
    pub(crate) fn new(
        prompt_tokens: u64,
        completion_tokens: u64,
        total_tokens: u64,
    ) -> Option<Self> {
        let bounded = [prompt_tokens, completion_tokens, total_tokens]
            .iter()
            .all(|v| *v <= MAX_USAGE_TOKENS);
        if !bounded
            || total_tokens == 0
            || total_tokens < prompt_tokens.checked_add(completion_tokens)?
        {
            return None;
        }
        Some(Self {
            prompt_tokens,
            completion_tokens,
            total_tokens,
        })
    }

    #[must_use]
    pub fn prompt_tokens(&self) -> u64 {
        self.prompt_tokens
    }
    #[must_use]
    pub fn completion_tokens(&self) -> u64 {
        self.completion_tokens
    }
    #[must_use]
    pub fn total_tokens(&self) -> u64 {
        self.total_tokens
    }
}

// The reference's value-based parser below is kept as the oracle the streaming scanner of the
// output contract is tested against.
#[cfg(test)]
fn strict_count(value: &serde_json::Value) -> Option<u64> {
    // Only JSON integers: `true`, `1.0` and strings are refused (pydantic strict mode).
    match value {
        serde_json::Value::Number(n) if n.is_u64() => n.as_u64().filter(|v| *v <= MAX_USAGE_TOKENS),
        _ => None,
    }
}

/// Reference `parse_isolated_acp_usage`: `None` for anything missing, malformed, extra-keyed or
/// zero. Never fails and never quotes its input.
#[must_use]
#[cfg(test)]
pub(crate) fn parse_isolated_acp_usage(
    value: Option<&serde_json::Value>,
) -> Option<IsolatedAcpUsage> {
    let object = value?.as_object()?;
    if object.len() != 3 {
        return None;
    }
    let prompt_tokens = strict_count(object.get("prompt_tokens")?)?;
    let completion_tokens = strict_count(object.get("completion_tokens")?)?;
    let total_tokens = strict_count(object.get("total_tokens")?)?;
    IsolatedAcpUsage::new(prompt_tokens, completion_tokens, total_tokens)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn usage_is_strict_bounded_and_numeric_only() {
        let ok = json!({"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120});
        let usage = parse_isolated_acp_usage(Some(&ok)).unwrap();
        assert_eq!(
            (
                usage.prompt_tokens(),
                usage.completion_tokens(),
                usage.total_tokens()
            ),
            (100, 20, 120)
        );
        for bad in [
            json!(null),
            json!([]),
            json!({"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 1}),
            json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}),
            json!({"prompt_tokens": true, "completion_tokens": 0, "total_tokens": 2}),
            json!({"prompt_tokens": 1.0, "completion_tokens": 0, "total_tokens": 2}),
            json!({"prompt_tokens": -1, "completion_tokens": 0, "total_tokens": 2}),
            json!({"prompt_tokens": "1", "completion_tokens": 0, "total_tokens": 2}),
            json!({"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 10_000_001}),
            json!({"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 2, "model": "x"}),
            json!({"prompt_tokens": 1, "completion_tokens": 0}),
        ] {
            assert_eq!(parse_isolated_acp_usage(Some(&bad)), None, "{bad}");
        }
        assert_eq!(parse_isolated_acp_usage(None), None);
    }
}
