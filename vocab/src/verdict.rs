//! [`GateVerdict`]: what one gate run concluded, the one spelling every crate uses (the gate
//! evidence's `outcome`, the job store's column, the review's facts, a follow-up turn's feedback).

use serde::{Deserialize, Serialize};

/// The verdict of one gate run. Its wire names (serde, [`Self::as_str`]) are the evidence
/// document's `outcome` values and the job store's stored text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GateVerdict {
    /// The gate's command succeeded (and, for a comparison, nothing regressed).
    Passed,
    /// The gate's command failed, or the candidate regressed against its baseline.
    Failed,
    /// The gate ran past its deadline.
    TimedOut,
    /// The gate was refused before it ran (the candidate holds what the content policy refuses).
    PolicyRefused,
    /// The gate could not run or its report could not be trusted.
    Error,
}

impl GateVerdict {
    /// Every verdict, in a fixed order (bounded metric labels, the store's `CHECK`).
    pub const ALL: [Self; 5] = [
        Self::Passed,
        Self::Failed,
        Self::TimedOut,
        Self::PolicyRefused,
        Self::Error,
    ];

    /// The wire name.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Passed => "passed",
            Self::Failed => "failed",
            Self::TimedOut => "timed_out",
            Self::PolicyRefused => "policy_refused",
            Self::Error => "error",
        }
    }

    /// Parses a wire name; any other text is `None` (each caller reports it with its own code).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

impl std::fmt::Display for GateVerdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_round_trip_through_text_and_serde() {
        for v in GateVerdict::ALL {
            assert_eq!(GateVerdict::parse(v.as_str()), Some(v));
            let json = serde_json::to_string(&v).unwrap();
            assert_eq!(json, format!("\"{}\"", v.as_str()));
            assert_eq!(serde_json::from_str::<GateVerdict>(&json).unwrap(), v);
        }
        for bad in ["", "Passed", "pass", "timed-out", "passed "] {
            assert_eq!(GateVerdict::parse(bad), None);
            assert!(serde_json::from_str::<GateVerdict>(&format!("\"{bad}\"")).is_err());
        }
    }
}
