//! Cluster DNS (`skiff-dns`): the records of CoreDNS's `kubernetes` plugin for the cluster
//! domain, built from Services and EndpointSlices, served over UDP and TCP; other names are
//! forwarded to the node's upstream resolvers.

pub mod feed;
pub mod records;

pub use records::{Answer, RecordIndex};
pub mod server;

pub use server::{DnsServer, Reply, handle_packet, read_upstreams};
