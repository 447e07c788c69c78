//! `sluice:handler/lease`: the time a call has left, and more of it when the
//! guest asks. The store moves the call's [`Deadline`](super::Deadline); the
//! worker keeps the leases of the call's messages as long as it.

use std::time::Duration;

use super::HostState;
use crate::sandbox::wit::sluice::handler::lease::Host;

impl Host for HostState {
    fn time_left(&mut self) -> u64 {
        millis(self.deadline.left())
    }

    fn extend(&mut self, ms: u64) -> u64 {
        millis(self.deadline.extend(Duration::from_millis(ms)))
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
