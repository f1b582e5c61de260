//! skiff's node agent: a kubelet that runs pods through the Container Runtime Interface on
//! containerd, and simulated (KWOK-style) nodes for control-plane tests and benchmarks.
//!
//! Entry points:
//! - [`run_agent`] with an [`AgentConfig`]: the real node agent (containerd + CRI).
//! - [`run_simulated_nodes`] / [`SimulatedNodes::start`]: register N fake nodes whose pods are
//!   reported Running without containers.
//! - [`images::import_images`]: `skiff images import`.
//!
//! The kubelet is a client of the Kubernetes API (`kube::Client`): it never touches the store.

pub mod agent;
pub mod backoff;
pub mod cgroups;
pub mod containerd;
pub mod cri;
pub mod dns;
pub mod envvars;
pub mod host;
pub mod images;
pub mod killall;
pub mod kuberuntime;
pub mod lease;
pub mod logs;
pub mod node;
pub mod pleg;
pub mod pod_workers;
pub mod prober;
pub mod qos;
pub mod sandbox_image;
pub mod server;
pub mod simulated;
pub mod stats;
pub mod status;
pub mod volumes;

pub use agent::{AgentConfig, run_agent};
pub use simulated::{SimulatedNodes, SimulatedNodesConfig, run_simulated_nodes};

/// Errors of the node agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Invalid settings or input (bad quantity, address range, missing file); the message says
    /// which.
    #[error("{0}")]
    Config(String),
    /// The Kubernetes API rejected a request or could not be reached.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A local file or process operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
}

impl Error {
    /// An [`Error::Io`] with context.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io { context: context.into(), source }
    }
}
