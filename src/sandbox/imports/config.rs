//! `sluice:handler/config`: the handler's own values from its sidecar.

use super::HostState;
use crate::sandbox::wit::sluice::handler::config::Host;

impl Host for HostState {
    fn get(&mut self, key: String) -> Option<String> {
        self.handler.config.get(&key).cloned()
    }

    fn get_all(&mut self) -> Vec<(String, String)> {
        self.handler
            .config
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
