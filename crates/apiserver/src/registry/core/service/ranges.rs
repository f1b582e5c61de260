//! The Service IP range (`--service-cluster-ip-range`) and the node-port range
//! (`--service-node-port-range`) as pure values: what is in range and the order in which
//! free values are tried (`pkg/registry/core/service/ipallocator` and `portallocator`).

use std::net::Ipv4Addr;

use rand::Rng;

/// `--service-cluster-ip-range`'s default (k3s's).
pub const DEFAULT_SERVICE_CIDR: &str = "10.43.0.0/16";
/// `--service-node-port-range`'s default (kube-apiserver's).
pub const DEFAULT_NODE_PORT_RANGE: &str = "30000-32767";

/// An IPv4 Service CIDR. Its usable addresses exclude the network and broadcast addresses;
/// the first usable one is the `kubernetes` Service's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceIpRange {
    network: u32,
    prefix: u8,
}

impl ServiceIpRange {
    /// Parses `A.B.C.D/N` (N from 8 to 30); the address is masked to its network.
    ///
    /// # Errors
    /// A message naming the bad CIDR.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, prefix) = s.split_once('/').ok_or_else(|| format!("invalid CIDR {s:?}: want ADDRESS/PREFIX"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|e| format!("invalid CIDR {s:?}: {e}"))?;
        let prefix: u8 = prefix.parse().map_err(|_| format!("invalid CIDR {s:?}: bad prefix"))?;
        if !(8..=30).contains(&prefix) {
            return Err(format!("invalid CIDR {s:?}: the prefix must be 8..=30"));
        }
        let mask = u32::MAX << (32 - prefix);
        Ok(Self { network: u32::from(addr) & mask, prefix })
    }

    fn size(&self) -> u32 {
        1u32 << (32 - self.prefix)
    }

    /// True when `ip` is a usable address of the range (not the network or broadcast one).
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let ip = u32::from(ip);
        ip > self.network && ip < self.network + self.size() - 1
    }

    /// The first usable address: the `kubernetes` Service's ClusterIP.
    pub fn first(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.network + 1)
    }

    /// Usable addresses in the range.
    pub fn usable(&self) -> u32 {
        self.size() - 2
    }

    /// The size of the lower band kept for static (requested) IPs, which dynamic allocation
    /// tries last: size/16 clamped to 16..=256, none for ranges under 16 addresses
    /// (KEP-3070, `calculateRangeOffset`).
    fn static_band(&self) -> u32 {
        let size = self.size();
        if size < 16 { 0 } else { (size / 16).clamp(16, 256) }
    }

    /// Every usable address, in the order dynamic allocation tries them: from a random point
    /// of the upper band round to its start, then the lower (static) band from a random point.
    pub fn candidates(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        let usable = self.usable();
        // Offsets 0.. are network+1...
        let band = self.static_band().min(usable);
        let upper = usable - band;
        let mut rng = rand::rng();
        let up_start = if upper > 0 { rng.random_range(0..upper) } else { 0 };
        let low_start = if band > 0 { rng.random_range(0..band) } else { 0 };
        let network = self.network;
        (0..upper)
            .map(move |i| band + (up_start + i) % upper)
            .chain((0..band).map(move |i| (low_start + i) % band))
            .map(move |off| Ipv4Addr::from(network + 1 + off))
    }
}

impl std::fmt::Display for ServiceIpRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.network), self.prefix)
    }
}

/// An inclusive node-port range such as `30000-32767`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePortRange {
    first: u16,
    last: u16,
}

impl NodePortRange {
    /// Parses `FIRST-LAST` (or one port), `FIRST <= LAST`, both 1..=65535.
    ///
    /// # Errors
    /// A message naming the bad range.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (a, b) = s.split_once('-').unwrap_or((s, s));
        let bad = || format!("invalid port range {s:?}: want FIRST-LAST");
        let first: u16 = a.trim().parse().map_err(|_| bad())?;
        let last: u16 = b.trim().parse().map_err(|_| bad())?;
        if first == 0 || first > last {
            return Err(bad());
        }
        Ok(Self { first, last })
    }

    /// True when `port` is in the range.
    pub fn contains(&self, port: i64) -> bool {
        port >= i64::from(self.first) && port <= i64::from(self.last)
    }

    /// Ports in the range.
    pub fn len(&self) -> u32 {
        u32::from(self.last - self.first) + 1
    }

    /// Never true: a range holds at least one port.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Every port, in the order dynamic allocation tries them: from a random one round the range.
    pub fn candidates(&self) -> impl Iterator<Item = u16> + '_ {
        let len = self.len();
        let start = rand::rng().random_range(0..len);
        let first = u32::from(self.first);
        (0..len).map(move |i| (first + (start + i) % len) as u16)
    }
}

impl std::fmt::Display for NodePortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_range_excludes_network_and_broadcast_and_starts_with_the_kubernetes_ip() {
        let r = ServiceIpRange::parse("10.43.7.9/16").unwrap();
        assert_eq!(r.to_string(), "10.43.0.0/16");
        assert_eq!(r.first(), Ipv4Addr::new(10, 43, 0, 1));
        assert!(!r.contains(Ipv4Addr::new(10, 43, 0, 0)));
        assert!(!r.contains(Ipv4Addr::new(10, 43, 255, 255)));
        assert!(r.contains(Ipv4Addr::new(10, 43, 255, 254)));
        assert!(!r.contains(Ipv4Addr::new(10, 44, 0, 1)));
        assert!(ServiceIpRange::parse("10.43.0.0").is_err());
        assert!(ServiceIpRange::parse("10.43.0.0/31").is_err());
    }

    #[test]
    fn dynamic_candidates_cover_every_usable_address_once_upper_band_first() {
        let r = ServiceIpRange::parse("10.0.0.0/24").unwrap();
        let all: Vec<Ipv4Addr> = r.candidates().collect();
        assert_eq!(all.len(), 254);
        let set: std::collections::BTreeSet<_> = all.iter().collect();
        assert_eq!(set.len(), 254);
        // The static band of a /24 is its first 16 usable addresses; they come last.
        assert!(all[..238].iter().all(|ip| u32::from(*ip) > u32::from(Ipv4Addr::new(10, 0, 0, 16))));
        let small = ServiceIpRange::parse("10.0.0.0/29").unwrap();
        assert_eq!(small.candidates().count(), 6);
    }

    #[test]
    fn node_port_ranges_parse_and_cover_every_port() {
        let r = NodePortRange::parse("30000-30004").unwrap();
        assert!(r.contains(30000) && r.contains(30004) && !r.contains(30005) && !r.contains(29999));
        let mut ports: Vec<u16> = r.candidates().collect();
        ports.sort();
        assert_eq!(ports, [30000, 30001, 30002, 30003, 30004]);
        assert_eq!(NodePortRange::parse(DEFAULT_NODE_PORT_RANGE).unwrap().len(), 2768);
        assert!(NodePortRange::parse("5-1").is_err());
        assert!(NodePortRange::parse("x").is_err());
    }
}
