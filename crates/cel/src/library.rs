//! Kubernetes' CEL libraries (k8s.io/apiserver `pkg/cel/library`) on top of cel-rust's
//! standard library and its strings and lists extensions:
//!
//! - lists: `isSorted()`, `sum()`, `min()`, `max()`, `indexOf(x)`, `lastIndexOf(x)`;
//! - regex: `find(re)`, `findAll(re)`, `findAll(re, n)` (`matches` is the standard one);
//! - URLs: `url(s)`, `isURL(s)`, `getScheme()`, `getHost()`, `getHostname()`, `getPort()`,
//!   `getEscapedPath()`, `getQuery()`;
//! - quantities: `quantity(s)`, `isQuantity(s)`, `sign()`, `isInteger()`, `asInteger()`,
//!   `asApproximateFloat()`, `add`, `sub`, `isGreaterThan`, `isLessThan`, `compareTo`;
//! - IPs and CIDRs: `ip(s)`, `isIP(s)`, `ip.isCanonical(s)`, `family()`, `isUnspecified()`,
//!   `isLoopback()`, `isLinkLocalMulticast()`, `isLinkLocalUnicast()`, `isGlobalUnicast()`,
//!   `cidr(s)`, `isCIDR(s)`, `containsIP`, `containsCIDR`, `ip()`, `masked()`,
//!   `prefixLength()`, and `string(...)` of each;
//! - sets: `sets.contains`, `sets.equivalent`, `sets.intersects`.
//!
//! Error messages are those of the upstream libraries (e.g. `invalid URL`, `cannot convert
//! value to integer`).

use std::any::Any;
use std::cmp::Ordering;
use std::net::IpAddr;
use std::sync::{Arc, LazyLock, Mutex};

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelString, DYN_TYPE, LIST_TYPE, STRING_TYPE, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::{DeclarationError, Env, ExecutionError};
use skiff_apimachinery::quantity::Quantity as Q;

type R<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn err(function: &str, message: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, message)
}

/// Registers every library on `env`.
///
/// # Errors
/// A name clash with an overload already declared (a programming error).
pub fn install(env: &mut Env) -> Result<(), DeclarationError> {
    lists(env)?;
    regex(env)?;
    urls(env)?;
    quantities(env)?;
    ips(env)?;
    sets(env)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lists.

fn lists(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_member_overload("isSorted", "list_is_sorted", LIST_TYPE, vec![], is_sorted)?;
    env.add_member_overload("sum", "list_sum", LIST_TYPE, vec![], sum)?;
    env.add_member_overload("min", "list_min", LIST_TYPE, vec![], list_min)?;
    env.add_member_overload("max", "list_max", LIST_TYPE, vec![], list_max)?;
    env.add_member_overload("indexOf", "list_index_of", LIST_TYPE, vec![DYN_TYPE], index_of)?;
    env.add_member_overload("lastIndexOf", "list_last_index_of", LIST_TYPE, vec![DYN_TYPE], last_index_of)?;
    Ok(())
}

fn elements<'a, 'v>(v: &'a (dyn Val + 'v), function: &str) -> Result<Vec<&'a (dyn Val + 'v)>, ExecutionError> {
    let it = v.as_iterable().ok_or_else(|| err(function, "not a list"))?;
    let mut iter = it.iter();
    let mut out = Vec::new();
    while let Some(x) = iter.next() {
        out.push(x);
    }
    Ok(out)
}

fn compare(a: &dyn Val, b: &dyn Val, function: &str) -> Result<Ordering, ExecutionError> {
    a.as_comparer().ok_or_else(|| err(function, "list elements are not comparable"))?.compare(b)
}

fn is_sorted<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    let items = elements(args[0].as_ref(), "isSorted")?;
    for w in items.windows(2) {
        if compare(w[0], w[1], "isSorted")? == Ordering::Greater {
            return Ok(CowVal::owned(CelBool::from(false)));
        }
    }
    Ok(CowVal::owned(CelBool::from(true)))
}

fn extreme<'b, 'v>(args: Vec<CowVal<'b, 'v>>, function: &str, want: Ordering) -> R<'b, 'v> {
    let items = elements(args[0].as_ref(), function)?;
    let Some(mut best) = items.first().copied() else {
        return Err(err(function, format!("{function} called on empty list")));
    };
    for x in items.into_iter().skip(1) {
        if compare(x, best, function)? == want {
            best = x;
        }
    }
    let owned: Box<dyn Val + 'v> = best.clone_as_boxed();
    Ok(CowVal::from(owned))
}

fn list_min<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    extreme(args, "min", Ordering::Less)
}

fn list_max<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    extreme(args, "max", Ordering::Greater)
}

fn sum<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    let items = elements(args[0].as_ref(), "sum")?;
    let Some(first) = items.first() else { return Ok(CowVal::owned(CelInt::from(0))) };
    let mut acc: Box<dyn Val + 'v> = first.clone_as_boxed();
    for x in items.into_iter().skip(1) {
        let adder = acc.as_adder().ok_or_else(|| err("sum", "list elements cannot be summed"))?;
        let next = adder.add(x)?.into_owned();
        acc = next;
    }
    Ok(CowVal::from(acc))
}

fn position<'b, 'v>(args: Vec<CowVal<'b, 'v>>, last: bool) -> R<'b, 'v> {
    let items = elements(args[0].as_ref(), "indexOf")?;
    let needle = args[1].as_ref();
    let found =
        if last { items.iter().rposition(|x| x.equals(needle)) } else { items.iter().position(|x| x.equals(needle)) };
    Ok(CowVal::owned(CelInt::from(found.map_or(-1, |i| i as i64))))
}

fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    position(args, false)
}

fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    position(args, true)
}

// ---------------------------------------------------------------------------------------------
// Regex.

/// Compiled patterns, as expressions repeat the same literal patterns on every evaluation.
static REGEX_CACHE: LazyLock<Mutex<std::collections::HashMap<String, Arc<regex::Regex>>>> =
    LazyLock::new(Default::default);

fn compiled_regex(pattern: &str, function: &str) -> Result<Arc<regex::Regex>, ExecutionError> {
    let mut cache = REGEX_CACHE.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(r) = cache.get(pattern) {
        return Ok(r.clone());
    }
    let re = Arc::new(regex::Regex::new(pattern).map_err(|e| err(function, e))?);
    // Bounded: patterns built at run time from data must not grow the cache forever.
    if cache.len() >= 1024 {
        cache.clear();
    }
    cache.insert(pattern.to_string(), re.clone());
    Ok(re)
}

fn regex(env: &mut Env) -> Result<(), DeclarationError> {
    cel::add_member_overload!(env, fn find: (CelString, CelString) -> Result<CelString>)?;
    cel::add_member_overload!(env, fn find_all: (CelString, CelString) -> Result<CelList>)?;
    cel::add_member_overload!(env, fn find_all_n: (CelString, CelString, CelInt) -> Result<CelList>, name = "findAll")?;
    Ok(())
}

fn find(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelString<'static>, ExecutionError> {
    let re = compiled_regex(re, "find")?;
    Ok(re.find(this).map(|m| m.as_str().to_string()).unwrap_or_default().into())
}

fn find_all(this: &CelString<'_>, re: &CelString<'_>) -> Result<CelList<'static>, ExecutionError> {
    find_all_limited(this, re, -1)
}

fn find_all_n(this: &CelString<'_>, re: &CelString<'_>, n: &CelInt) -> Result<CelList<'static>, ExecutionError> {
    find_all_limited(this, re, *n.inner())
}

fn find_all_limited(this: &str, re: &str, n: i64) -> Result<CelList<'static>, ExecutionError> {
    let re = compiled_regex(re, "findAll")?;
    let limit = if n < 0 { usize::MAX } else { n as usize };
    let found: Vec<Box<dyn Val>> = re
        .find_iter(this)
        .take(limit)
        .map(|m| Box::new(CelString::from(m.as_str().to_string())) as Box<dyn Val>)
        .collect();
    Ok(CelList::from(found))
}

// ---------------------------------------------------------------------------------------------
// Opaque library types.

macro_rules! opaque {
    ($ty:ident, $static:ident, $name:literal) => {
        static $static: Type = Type::new_unspecified_type($name);

        impl Val for $ty {
            fn get_type(&self) -> &Type {
                &$static
            }
            fn cel_type() -> &'static Type {
                &$static
            }
            fn equals(&self, other: &dyn Val) -> bool {
                other.downcast_ref::<$ty>().is_some_and(|o| o == self)
            }
            fn clone_as_boxed<'v>(&self) -> Box<dyn Val + 'v> {
                Box::new(self.clone())
            }
            fn as_any(&self) -> Option<&dyn Any> {
                Some(self)
            }
        }

        impl StaticVal for $ty {}
    };
}

// ---------------------------------------------------------------------------------------------
// URLs (Go's url.ParseRequestURI: an absolute URI or an absolute path).

/// `kubernetes.URL`.
#[derive(Debug, Clone, PartialEq)]
pub struct Url {
    scheme: String,
    host: String,
    hostname: String,
    port: String,
    escaped_path: String,
    query: Vec<(String, String)>,
}

opaque!(Url, URL_TYPE, "kubernetes.URL");

impl Url {
    /// Parses as Go's `url.ParseRequestURI` accepts: an absolute URL or an absolute path.
    pub fn parse(s: &str) -> Option<Url> {
        if s.starts_with('/') {
            let parsed = url::Url::parse("http://placeholder").ok()?.join(s).ok()?;
            return Some(Url {
                scheme: String::new(),
                host: String::new(),
                hostname: String::new(),
                port: String::new(),
                escaped_path: parsed.path().to_string(),
                query: parsed.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect(),
            });
        }
        let u = url::Url::parse(s).ok()?;
        if u.cannot_be_a_base() {
            return None;
        }
        let hostname = match u.host() {
            Some(url::Host::Ipv6(a)) => a.to_string(),
            Some(h) => h.to_string(),
            None => String::new(),
        };
        // Go keeps the port as written, the url crate drops a scheme's default port: read it
        // from the authority.
        let port = authority_port(s).unwrap_or_default();
        let host = match u.host() {
            Some(url::Host::Ipv6(a)) if port.is_empty() => format!("[{a}]"),
            Some(url::Host::Ipv6(a)) => format!("[{a}]:{port}"),
            _ if port.is_empty() => hostname.clone(),
            _ => format!("{hostname}:{port}"),
        };
        Some(Url {
            scheme: u.scheme().to_string(),
            host,
            hostname,
            port,
            escaped_path: if u.path() == "/" && !s.trim_end_matches(['?', '#']).ends_with('/') {
                String::new()
            } else {
                u.path().to_string()
            },
            query: u.query_pairs().map(|(k, v)| (k.into_owned(), v.into_owned())).collect(),
        })
    }
}

fn authority_port(s: &str) -> Option<String> {
    let rest = s.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let after = if let Some(end) = host_port.find(']') { &host_port[end + 1..] } else { host_port };
    after.rsplit_once(':').map(|(_, p)| p.to_string()).filter(|p| !p.is_empty())
}

fn urls(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(URL_TYPE.to_owned())?;
    cel::add_overload!(env, fn url: (CelString) -> Result<Url>)?;
    cel::add_overload!(env, fn is_url: (CelString) -> CelBool, name = "isURL")?;
    cel::add_member_overload!(env, fn get_scheme: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_host: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_hostname: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_port: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_escaped_path: (Url) -> CelString)?;
    cel::add_member_overload!(env, fn get_query: (Url) -> CelMap)?;
    Ok(())
}

fn url(s: &CelString<'_>) -> Result<Url, ExecutionError> {
    Url::parse(s).ok_or_else(|| {
        err(
            "url",
            format!(
                "URL parse error during conversion from string: parse {:?}: invalid URI for request",
                s.as_ref() as &str
            ),
        )
    })
}

fn is_url(s: &CelString<'_>) -> CelBool {
    CelBool::from(Url::parse(s).is_some())
}

fn get_scheme(u: &Url) -> CelString<'static> {
    u.scheme.clone().into()
}

fn get_host(u: &Url) -> CelString<'static> {
    u.host.clone().into()
}

fn get_hostname(u: &Url) -> CelString<'static> {
    u.hostname.clone().into()
}

fn get_port(u: &Url) -> CelString<'static> {
    u.port.clone().into()
}

fn get_escaped_path(u: &Url) -> CelString<'static> {
    u.escaped_path.clone().into()
}

fn get_query(u: &Url) -> CelMap<'static> {
    let mut grouped: Vec<(String, Vec<String>)> = Vec::new();
    for (k, v) in &u.query {
        match grouped.iter_mut().find(|(g, _)| g == k) {
            Some((_, vs)) => vs.push(v.clone()),
            None => grouped.push((k.clone(), vec![v.clone()])),
        }
    }
    let map = grouped
        .into_iter()
        .map(|(k, vs)| {
            let list: Vec<Box<dyn Val>> =
                vs.into_iter().map(|v| Box::new(CelString::from(v)) as Box<dyn Val>).collect();
            (CelMapKey::from(k), Box::new(CelList::from(list)) as Box<dyn Val>)
        })
        .collect::<std::collections::HashMap<_, _>>();
    CelMap::from(map)
}

// ---------------------------------------------------------------------------------------------
// Quantities.

/// `kubernetes.Quantity`: a `resource.Quantity` (held in milli-units, as skiff's
/// [`skiff_apimachinery::quantity::Quantity`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Quantity(Q);

opaque!(Quantity, QUANTITY_TYPE, "kubernetes.Quantity");

fn quantities(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(QUANTITY_TYPE.to_owned())?;
    cel::add_overload!(env, fn quantity: (CelString) -> Result<Quantity>)?;
    cel::add_overload!(env, fn is_quantity: (CelString) -> CelBool)?;
    cel::add_member_overload!(env, fn sign: (Quantity) -> CelInt)?;
    cel::add_member_overload!(env, fn is_integer: (Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn as_integer: (Quantity) -> Result<CelInt>)?;
    cel::add_member_overload!(env, fn as_approximate_float: (Quantity) -> CelDouble)?;
    cel::add_member_overload!(env, fn q_add: (Quantity, Quantity) -> Quantity, name = "add")?;
    cel::add_member_overload!(env, fn q_add_int: (Quantity, CelInt) -> Quantity, name = "add")?;
    cel::add_member_overload!(env, fn q_sub: (Quantity, Quantity) -> Quantity, name = "sub")?;
    cel::add_member_overload!(env, fn q_sub_int: (Quantity, CelInt) -> Quantity, name = "sub")?;
    cel::add_member_overload!(env, fn is_greater_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn is_less_than: (Quantity, Quantity) -> CelBool)?;
    cel::add_member_overload!(env, fn compare_to: (Quantity, Quantity) -> CelInt)?;
    Ok(())
}

fn quantity(s: &CelString<'_>) -> Result<Quantity, ExecutionError> {
    Q::parse(s).map(Quantity).map_err(|e| err("quantity", e))
}

fn is_quantity(s: &CelString<'_>) -> CelBool {
    CelBool::from(Q::parse(s).is_ok())
}

fn sign(q: &Quantity) -> CelInt {
    CelInt::from(q.0.milli.signum() as i64)
}

fn is_integer(q: &Quantity) -> CelBool {
    CelBool::from(q.0.milli % 1000 == 0 && i64::try_from(q.0.milli / 1000).is_ok())
}

fn as_integer(q: &Quantity) -> Result<CelInt, ExecutionError> {
    if q.0.milli % 1000 != 0 {
        return Err(err("asInteger", "cannot convert value to integer"));
    }
    i64::try_from(q.0.milli / 1000).map(CelInt::from).map_err(|_| err("asInteger", "cannot convert value to integer"))
}

fn as_approximate_float(q: &Quantity) -> CelDouble {
    CelDouble::from(q.0.as_f64())
}

fn q_add(a: &Quantity, b: &Quantity) -> Quantity {
    Quantity(a.0 + b.0)
}

fn q_add_int(a: &Quantity, b: &CelInt) -> Quantity {
    Quantity(a.0 + Q { milli: i128::from(*b.inner()) * 1000, binary: false })
}

fn q_sub(a: &Quantity, b: &Quantity) -> Quantity {
    Quantity(a.0 + Q { milli: -b.0.milli, binary: b.0.binary })
}

fn q_sub_int(a: &Quantity, b: &CelInt) -> Quantity {
    Quantity(a.0 + Q { milli: -i128::from(*b.inner()) * 1000, binary: false })
}

fn is_greater_than(a: &Quantity, b: &Quantity) -> CelBool {
    CelBool::from(a.0.milli > b.0.milli)
}

fn is_less_than(a: &Quantity, b: &Quantity) -> CelBool {
    CelBool::from(a.0.milli < b.0.milli)
}

fn compare_to(a: &Quantity, b: &Quantity) -> CelInt {
    CelInt::from(match a.0.milli.cmp(&b.0.milli) {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    })
}

// ---------------------------------------------------------------------------------------------
// IPs and CIDRs (k8s.io/apiserver `library/ip.go`, `library/cidr.go`): IPv4-mapped IPv6
// addresses and zones are refused, as upstream's netip parsing does.

/// `net.IP`.
#[derive(Debug, Clone, PartialEq)]
pub struct Ip(IpAddr);

opaque!(Ip, IP_TYPE, "net.IP");

/// `net.CIDR`: an address and prefix length (the address as written, not masked).
#[derive(Debug, Clone, PartialEq)]
pub struct Cidr(IpAddr, u8);

opaque!(Cidr, CIDR_TYPE, "net.CIDR");

fn parse_ip(s: &str) -> Option<IpAddr> {
    if s.contains('%') {
        return None;
    }
    let ip: IpAddr = s.parse().ok()?;
    if let IpAddr::V6(v6) = ip
        && v6.to_ipv4_mapped().is_some()
    {
        return None;
    }
    Some(ip)
}

fn parse_cidr(s: &str) -> Option<Cidr> {
    let (addr, len) = s.split_once('/')?;
    let ip = parse_ip(addr)?;
    if len.is_empty() || (len.len() > 1 && len.starts_with('0')) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some(Cidr(ip, len))
}

fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let m = if len == 0 { 0 } else { u32::MAX << (32 - u32::from(len)) };
            IpAddr::V4((bits & m).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let m = if len == 0 { 0 } else { u128::MAX << (128 - u32::from(len)) };
            IpAddr::V6((bits & m).into())
        }
    }
}

fn ips(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_type(IP_TYPE.to_owned())?;
    env.add_type(CIDR_TYPE.to_owned())?;
    cel::add_overload!(env, fn ip: (CelString) -> Result<Ip>)?;
    cel::add_overload!(env, fn is_ip: (CelString) -> CelBool, name = "isIP")?;
    cel::add_overload!(env, fn ip_is_canonical: (CelString) -> Result<CelBool>, name = "ip.isCanonical")?;
    cel::add_overload!(env, fn ip_string: (Ip) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn family: (Ip) -> CelInt)?;
    cel::add_member_overload!(env, fn is_unspecified: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_loopback: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_multicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_link_local_unicast: (Ip) -> CelBool)?;
    cel::add_member_overload!(env, fn is_global_unicast: (Ip) -> CelBool)?;
    cel::add_overload!(env, fn cidr: (CelString) -> Result<Cidr>)?;
    cel::add_overload!(env, fn is_cidr: (CelString) -> CelBool, name = "isCIDR")?;
    cel::add_overload!(env, fn cidr_string: (Cidr) -> CelString, name = "string")?;
    cel::add_member_overload!(env, fn contains_ip: (Cidr, Ip) -> CelBool, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_ip_string: (Cidr, CelString) -> Result<CelBool>, name = "containsIP")?;
    cel::add_member_overload!(env, fn contains_cidr: (Cidr, Cidr) -> CelBool, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn contains_cidr_string: (Cidr, CelString) -> Result<CelBool>, name = "containsCIDR")?;
    cel::add_member_overload!(env, fn cidr_ip: (Cidr) -> Ip, name = "ip")?;
    cel::add_member_overload!(env, fn masked: (Cidr) -> Cidr)?;
    cel::add_member_overload!(env, fn prefix_length: (Cidr) -> CelInt)?;
    Ok(())
}

fn ip(s: &CelString<'_>) -> Result<Ip, ExecutionError> {
    parse_ip(s).map(Ip).ok_or_else(|| {
        err(
            "ip",
            format!(
                "IP Address {:?} parse error during conversion from string: ParseAddr({:?}): unable to parse IP",
                s.as_ref() as &str,
                s.as_ref() as &str
            ),
        )
    })
}

fn is_ip(s: &CelString<'_>) -> CelBool {
    CelBool::from(parse_ip(s).is_some())
}

fn ip_is_canonical(s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let ip = parse_ip(s).ok_or_else(|| {
        err("ip.isCanonical", format!("IP Address {:?} parse error during conversion from string", s.as_ref() as &str))
    })?;
    Ok(CelBool::from(ip.to_string() == s.as_ref() as &str))
}

fn ip_string(ip: &Ip) -> CelString<'static> {
    ip.0.to_string().into()
}

fn family(ip: &Ip) -> CelInt {
    CelInt::from(if ip.0.is_ipv4() { 4 } else { 6 })
}

fn is_unspecified(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_unspecified())
}

fn is_loopback(ip: &Ip) -> CelBool {
    CelBool::from(ip.0.is_loopback())
}

fn is_link_local_multicast(ip: &Ip) -> CelBool {
    CelBool::from(match ip.0 {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] & 0xff0f == 0xff02,
    })
}

fn is_link_local_unicast(ip: &Ip) -> CelBool {
    CelBool::from(match ip.0 {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    })
}

fn is_global_unicast(ip: &Ip) -> CelBool {
    // Go's IsGlobalUnicast: not unspecified, loopback, multicast, link-local or (v4) broadcast.
    CelBool::from(match ip.0 {
        IpAddr::V4(a) => {
            !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.is_link_local() || a.is_broadcast())
        }
        IpAddr::V6(a) => {
            !(a.is_unspecified() || a.is_loopback() || a.is_multicast() || a.segments()[0] & 0xffc0 == 0xfe80)
        }
    })
}

fn cidr(s: &CelString<'_>) -> Result<Cidr, ExecutionError> {
    parse_cidr(s).ok_or_else(|| {
        err(
            "cidr",
            format!(
                "network address parse error during conversion from string: network address {:?} is not a valid CIDR",
                s.as_ref() as &str
            ),
        )
    })
}

fn is_cidr(s: &CelString<'_>) -> CelBool {
    CelBool::from(parse_cidr(s).is_some())
}

fn cidr_string(c: &Cidr) -> CelString<'static> {
    format!("{}/{}", c.0, c.1).into()
}

fn contains(c: &Cidr, ip: IpAddr) -> bool {
    c.0.is_ipv4() == ip.is_ipv4() && mask(ip, c.1) == mask(c.0, c.1)
}

fn contains_ip(c: &Cidr, ip: &Ip) -> CelBool {
    CelBool::from(contains(c, ip.0))
}

fn contains_ip_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let ip =
        parse_ip(s).ok_or_else(|| err("containsIP", format!("IP Address {:?} parse error", s.as_ref() as &str)))?;
    Ok(CelBool::from(contains(c, ip)))
}

fn contains_cidr(c: &Cidr, other: &Cidr) -> CelBool {
    CelBool::from(other.1 >= c.1 && contains(c, other.0))
}

fn contains_cidr_string(c: &Cidr, s: &CelString<'_>) -> Result<CelBool, ExecutionError> {
    let other = parse_cidr(s)
        .ok_or_else(|| err("containsCIDR", format!("network address {:?} is not a valid CIDR", s.as_ref() as &str)))?;
    Ok(contains_cidr(c, &other))
}

fn cidr_ip(c: &Cidr) -> Ip {
    Ip(c.0)
}

fn masked(c: &Cidr) -> Cidr {
    Cidr(mask(c.0, c.1), c.1)
}

fn prefix_length(c: &Cidr) -> CelInt {
    CelInt::from(i64::from(c.1))
}

// ---------------------------------------------------------------------------------------------
// Sets (cel-go's ext.Sets).

fn sets(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("sets.contains", "list_sets_contains_list", vec![LIST_TYPE, LIST_TYPE], sets_contains)?;
    env.add_overload("sets.equivalent", "list_sets_equivalent_list", vec![LIST_TYPE, LIST_TYPE], sets_equivalent)?;
    env.add_overload("sets.intersects", "list_sets_intersects_list", vec![LIST_TYPE, LIST_TYPE], sets_intersects)?;
    let _ = STRING_TYPE;
    Ok(())
}

fn all_in(a: &[&dyn Val], b: &[&dyn Val]) -> bool {
    a.iter().all(|x| b.iter().any(|y| x.equals(*y)))
}

fn sets_contains<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    let a = elements(args[0].as_ref(), "sets.contains")?;
    let b = elements(args[1].as_ref(), "sets.contains")?;
    Ok(CowVal::owned(CelBool::from(all_in(&b, &a))))
}

fn sets_equivalent<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    let a = elements(args[0].as_ref(), "sets.equivalent")?;
    let b = elements(args[1].as_ref(), "sets.equivalent")?;
    Ok(CowVal::owned(CelBool::from(all_in(&a, &b) && all_in(&b, &a))))
}

fn sets_intersects<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> R<'b, 'v> {
    let a = elements(args[0].as_ref(), "sets.intersects")?;
    let b = elements(args[1].as_ref(), "sets.intersects")?;
    Ok(CowVal::owned(CelBool::from(a.iter().any(|x| b.iter().any(|y| x.equals(*y))))))
}

/// Whether `s` matches the regular expression `pattern` (unanchored, as OpenAPI's `pattern`
/// and CEL's `matches`), with compiled patterns cached.
///
/// # Errors
/// The pattern does not compile.
pub fn regex_matches(pattern: &str, s: &str) -> Result<bool, String> {
    compiled_regex(pattern, "matches").map(|re| re.is_match(s)).map_err(|e| e.to_string())
}
