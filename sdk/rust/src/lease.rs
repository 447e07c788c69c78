//! The call's deadline. A call may take up to the handler's
//! `limits.timeout`; work that runs longer asks for more time while it
//! works, up to `limits.max_extend` beyond the timeout in all. Extending
//! also keeps the leases of the call's messages, so no other host gets them.

use std::time::Duration;

use crate::host;
use crate::outcome::millis;

/// The time left before the call's deadline (zero once it has passed).
pub fn time_left() -> Duration {
    Duration::from_millis(host::lease_time_left())
}

/// Moves the deadline to `time` from now, if that is later than it is, and
/// returns the time now left. The deadline never moves past the call's
/// start plus `limits.timeout` plus `limits.max_extend`: asking for more
/// gets up to that.
pub fn extend(time: Duration) -> Duration {
    Duration::from_millis(host::lease_extend(millis(time)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeHost;

    #[test]
    fn extends_never_shortens() {
        let _host = FakeHost::new().with_time_left(Duration::from_secs(2));
        assert_eq!(time_left(), Duration::from_secs(2));
        assert_eq!(extend(Duration::from_secs(5)), Duration::from_secs(5));
        assert_eq!(extend(Duration::from_secs(1)), Duration::from_secs(5));
        assert_eq!(time_left(), Duration::from_secs(5));
    }
}
