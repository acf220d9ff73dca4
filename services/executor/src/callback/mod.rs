//! The HTTP callback action, and what its answer means for the task.

use std::time::Duration;

#[cfg(test)]
use crate::turns::MIN_HOLD_BACK;

/// How much of a response body is kept with the task.
pub const EXCERPT_BYTES: usize = 1024;
/// An occurrence is deferred by its target's `Retry-After` (not counted as an attempt)
/// only while it would then be at most this late; after that, such an answer is a failed
/// attempt like any other, so that a target asking again and again cannot keep an
/// occurrence forever.
pub const DEFER_WHILE_LATE_BY: Duration = Duration::from_secs(3600);

/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);

mod attempt;
mod caller;
mod request;
mod target;
#[cfg(test)]
mod tests;

pub use attempt::*;
pub use caller::*;
pub use request::*;
pub use target::*;
