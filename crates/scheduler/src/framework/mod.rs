//! The scheduling framework: the plugin API (extension-point traits, [`CycleState`], [`Status`],
//! [`NodeInfo`], [`PodInfo`]) and the runtime that runs a profile's plugins ([`Framework`]).
//!
//! Plugins depend on this module only, never on the queue, cache or scheduler loop.
//! See <https://kubernetes.io/docs/concepts/scheduling-eviction/scheduling-framework/>.

pub mod cycle_state;
pub mod diagnosis;
pub mod interface;
pub mod metrics;
pub mod node_info;
pub mod parallelize;
pub mod registry;
pub mod resource;
pub mod runtime;
pub mod status;
pub mod types;

pub use cycle_state::{CycleState, StateData};
pub use diagnosis::{Diagnosis, FitError};
pub use interface::*;
pub use node_info::{ImageStateSummary, NodeInfo, Snapshot};
pub use parallelize::Parallelizer;
pub use registry::{PluginFactory, Registry};
pub use resource::Resource;
pub use runtime::{Framework, PluginSets};
pub use status::{Code, Status};
pub use types::*;
