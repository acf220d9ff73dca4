//! Per-timer policies for occurrences that are late or overlap (see docs/semantics.md).

use serde::{Deserialize, Serialize};

/// What becomes of occurrences missed by more than the misfire threshold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum MisfirePolicy {
    /// None of them fires.
    Skip,
    /// The latest of them fires, once.
    #[default]
    FireOnce,
    /// Each of them within the catch-up window fires.
    FireAll,
}

/// What happens when a recurring timer's occurrence is due while its previous run is
/// still running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum OverlapPolicy {
    /// Both run.
    #[default]
    Allow,
    /// The new one is dropped (cancelled).
    Skip,
    /// The new one waits until the running one ends; a further one meanwhile is dropped.
    BufferOne,
}

/// The default catch-up window of `fire_all`: one hour.
pub const DEFAULT_CATCHUP_WINDOW_MS: i64 = 3_600_000;

macro_rules! text_enum {
    ($t:ty { $($variant:ident = $text:literal),+ }) => {
        impl $t {
            pub fn as_str(self) -> &'static str {
                match self { $(<$t>::$variant => $text),+ }
            }
            pub fn parse(s: &str) -> Option<Self> {
                match s { $($text => Some(<$t>::$variant),)+ _ => None }
            }
        }
    };
}

text_enum!(MisfirePolicy { Skip = "skip", FireOnce = "fire_once", FireAll = "fire_all" });
text_enum!(OverlapPolicy { Allow = "allow", Skip = "skip", BufferOne = "buffer_one" });

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_match_serde_and_the_schema() {
        for p in [MisfirePolicy::Skip, MisfirePolicy::FireOnce, MisfirePolicy::FireAll] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
            assert_eq!(MisfirePolicy::parse(p.as_str()), Some(p));
        }
        for p in [OverlapPolicy::Allow, OverlapPolicy::Skip, OverlapPolicy::BufferOne] {
            assert_eq!(serde_json::to_value(p).unwrap(), p.as_str());
            assert_eq!(OverlapPolicy::parse(p.as_str()), Some(p));
        }
    }
}
