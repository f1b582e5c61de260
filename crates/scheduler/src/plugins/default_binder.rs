//! DefaultBinder: binds through the API (`POST pods/{name}/binding`).

use async_trait::async_trait;

use crate::framework::{BindPlugin, CycleState, Handle, Plugin, PodInfo, Status};

use super::names;

/// The DefaultBinder plugin.
pub struct DefaultBinder {
    handle: Handle,
}

impl DefaultBinder {
    /// A binder writing through `handle.api`.
    pub fn new(handle: Handle) -> Self {
        Self { handle }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &str {
        names::DEFAULT_BINDER
    }
    crate::extension_points!(bind);
}

#[async_trait]
impl BindPlugin for DefaultBinder {
    async fn bind(&self, _state: &CycleState, pod: &PodInfo, node: &str) -> Status {
        match self.handle.api.bind(pod, node).await {
            Ok(()) => Status::success(),
            Err(e) => Status::error(format!("binding rejected: {e:#}")),
        }
    }
}
