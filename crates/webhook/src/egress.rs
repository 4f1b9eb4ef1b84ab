//! Where a webhook may be sent: https URLs whose host resolves, at the moment of sending, to
//! globally routable addresses only, unless an operator allowed an address block or plain
//! http to a host. The check is made by the client's connector as it opens each connection, so
//! the address checked is the address connected to (a name that resolved to a public address
//! when the subscription was made and to a private one now is refused now), and the request
//! keeps the URL's host name for its `Host` header and TLS server name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// A block of addresses, `ADDRESS/PREFIX` or a single address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl std::str::FromStr for Cidr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or ADDRESS/PREFIX"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix is 0 to {max}"))?,
            None => max,
        };
        Ok(Self { addr, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is in the block (an IPv4 address mapped into IPv6 counts as IPv4).
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

/// An IPv4 address mapped into IPv6 (`::ffff:a.b.c.d`) as the IPv4 address it is.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Whether `ip` is globally routable: outside every block of the IANA special-purpose address
/// registries that is not global (private, loopback, link-local, shared, documentation,
/// benchmarking, multicast, reserved, unique-local, and the transition prefixes that embed
/// such an address).
pub fn is_global(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_global_v4(v4),
        IpAddr::V6(v6) => is_global_v6(v6),
    }
}

fn is_global_v4(ip: Ipv4Addr) -> bool {
    const NOT_GLOBAL: [(u32, u8); 15] = [
        (0x0000_0000, 8),  // 0.0.0.0/8 "this network"
        (0x0a00_0000, 8),  // 10.0.0.0/8 private
        (0x6440_0000, 10), // 100.64.0.0/10 shared address space
        (0x7f00_0000, 8),  // 127.0.0.0/8 loopback
        (0xa9fe_0000, 16), // 169.254.0.0/16 link-local (cloud metadata endpoints)
        (0xac10_0000, 12), // 172.16.0.0/12 private
        (0xc000_0000, 24), // 192.0.0.0/24 IETF protocol assignments
        (0xc000_0200, 24), // 192.0.2.0/24 documentation
        (0xc058_6300, 24), // 192.88.99.0/24 6to4 relay anycast
        (0xc0a8_0000, 16), // 192.168.0.0/16 private
        (0xc612_0000, 15), // 198.18.0.0/15 benchmarking
        (0xc633_6400, 24), // 198.51.100.0/24 documentation
        (0xcb00_7100, 24), // 203.0.113.0/24 documentation
        (0xe000_0000, 4),  // 224.0.0.0/4 multicast
        (0xf000_0000, 4),  // 240.0.0.0/4 reserved, and the broadcast address
    ];
    let ip = u32::from(ip);
    !NOT_GLOBAL.iter().any(|(net, prefix)| {
        let mask = u32::MAX << (32 - u32::from(*prefix));
        ip & mask == *net
    })
}

fn is_global_v6(ip: Ipv6Addr) -> bool {
    let bits = u128::from(ip);
    let within = |net: u128, prefix: u32| {
        let mask = u128::MAX.checked_shl(128 - prefix).unwrap_or(0);
        bits & mask == net
    };
    // NAT64 (64:ff9b::/96) carries an IPv4 address in its last 32 bits: as global as it is.
    if within(0x0064_ff9b_0000_0000_0000_0000_0000_0000, 96) {
        return is_global_v4(Ipv4Addr::from(bits as u32));
    }
    // Global unicast is 2000::/3; of it, these blocks are not global.
    within(0x2000_0000_0000_0000_0000_0000_0000_0000, 3)
        && !within(0x2001_0000_0000_0000_0000_0000_0000_0000, 23) // IETF protocol assignments
        && !within(0x2001_0db8_0000_0000_0000_0000_0000_0000, 32) // documentation
        && !within(0x2002_0000_0000_0000_0000_0000_0000_0000, 16) // 6to4
        && !within(0x3fff_0000_0000_0000_0000_0000_0000_0000, 20) // documentation
}

/// The operator's exceptions to "https to globally routable addresses only".
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    /// Address blocks that may be sent to although they are not globally routable.
    pub allow: Vec<Cidr>,
    /// Hosts (as written in URLs: a name, or an IP address) that may be sent to over plain
    /// http; every other URL must be https.
    pub http_hosts: Vec<String>,
}

/// Why a URL may not be sent to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The text is not an absolute URL with a host.
    #[error("not an absolute http(s) URL with a host")]
    Malformed,
    /// Not https, and plain http is not allowed to its host.
    #[error("webhook URLs must be https")]
    NotHttps,
    /// The URL carries a user name or password.
    #[error("webhook URLs may not carry credentials")]
    Credentials,
    /// The host is (or resolved only to) an address that is not globally routable.
    #[error("the webhook's host is not a globally routable address")]
    Refused,
    /// The host name did not resolve.
    #[error("the webhook's host name did not resolve")]
    Unresolved,
}

/// A URL that passed [`EgressPolicy::check_url`], taken apart once for every attempt to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL as given.
    text: String,
    /// `https`, or plain http to a listed host.
    pub(crate) https: bool,
    /// The host as the URL writes it (an IPv6 address in brackets).
    pub(crate) host: String,
    /// The host's address when the URL gives one.
    pub(crate) ip: Option<IpAddr>,
    pub(crate) port: u16,
    /// The path and query: the request's target.
    pub(crate) path: String,
    /// The `Host` header: the host, and the port when the URL gives one.
    pub(crate) authority: String,
    /// Scheme, host and port: what connections are kept and limited by.
    origin: String,
}

impl Endpoint {
    /// The URL as given.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its host as the URL writes it.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Its scheme, host and port (`https://hooks.example.com:443`): a destination.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The name the TLS handshake asks for: the host without an IPv6 address's brackets.
    pub(crate) fn server_name(&self) -> &str {
        self.host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl EgressPolicy {
    /// Whether sending to `ip` is allowed.
    pub fn permits(&self, ip: IpAddr) -> bool {
        is_global(ip) || self.allow.iter().any(|c| c.contains(ip))
    }

    /// The URL if it may be sent to as far as its text tells: https (or http to a listed
    /// host), no credentials, and a host that is an allowed address or a name (names are
    /// checked when they are resolved, at each new connection). Parsed once, it is sent to
    /// as many times as needed.
    pub fn check_url(&self, text: &str) -> Result<Endpoint, EgressError> {
        let url = url::Url::parse(text).map_err(|_| EgressError::Malformed)?;
        let host = url.host_str().ok_or(EgressError::Malformed)?.to_owned();
        let https = match url.scheme() {
            "https" => true,
            "http"
                if self
                    .http_hosts
                    .iter()
                    .any(|h| h.eq_ignore_ascii_case(&host)) =>
            {
                false
            }
            "http" => return Err(EgressError::NotHttps),
            _ => return Err(EgressError::Malformed),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(EgressError::Credentials);
        }
        let ip = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if ip.is_some_and(|ip| !self.permits(ip)) {
            return Err(EgressError::Refused);
        }
        let port = url.port_or_known_default().ok_or(EgressError::Malformed)?;
        let authority = match url.port() {
            Some(p) => format!("{host}:{p}"),
            None => host.clone(),
        };
        let path = match url.query() {
            Some(q) => format!("{}?{q}", url.path()),
            None => url.path().to_owned(),
        };
        Ok(Endpoint {
            origin: format!("{}://{host}:{port}", url.scheme()),
            https,
            ip,
            port,
            path,
            authority,
            host,
            text: text.to_owned(),
        })
    }

    /// The addresses of `name` that may be connected to, resolved now; an error when it does
    /// not resolve or none of its addresses is allowed.
    pub async fn resolve(&self, name: &str) -> Result<Vec<SocketAddr>, EgressError> {
        let found: Vec<SocketAddr> = tokio::net::lookup_host((name, 0))
            .await
            .map_err(|_| EgressError::Unresolved)?
            .collect();
        if found.is_empty() {
            return Err(EgressError::Unresolved);
        }
        let allowed: Vec<SocketAddr> = found.into_iter().filter(|a| self.permits(a.ip())).collect();
        if allowed.is_empty() {
            return Err(EgressError::Refused);
        }
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn special_purpose_addresses_are_not_global() {
        for s in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "198.18.0.1",
            "192.0.2.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2001:db8::1",
            "2002:7f00:1::1",
        ] {
            assert!(!is_global(ip(s)), "{s} counted as global");
        }
        for s in [
            "1.1.1.1",
            "8.8.8.8",
            "172.32.0.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_global(ip(s)), "{s} counted as not global");
        }
    }

    #[test]
    fn urls_are_checked_by_scheme_credentials_and_literal_address() {
        let strict = EgressPolicy::default();
        assert!(strict.check_url("https://hooks.example.com/x").is_ok());
        assert_eq!(
            strict.check_url("http://hooks.example.com/x"),
            Err(EgressError::NotHttps)
        );
        assert_eq!(
            strict.check_url("https://u:p@hooks.example.com/"),
            Err(EgressError::Credentials)
        );
        assert_eq!(strict.check_url("ftp://x/"), Err(EgressError::Malformed));
        assert_eq!(strict.check_url("not a url"), Err(EgressError::Malformed));
        for refused in [
            "https://127.0.0.1/",
            "https://10.0.0.7:8443/",
            "https://169.254.169.254/latest/meta-data",
            "https://[::1]/",
            "https://[::ffff:127.0.0.1]/",
        ] {
            assert_eq!(
                strict.check_url(refused),
                Err(EgressError::Refused),
                "{refused}"
            );
        }
        let open = EgressPolicy {
            allow: vec!["127.0.0.0/8".parse().unwrap()],
            http_hosts: vec!["127.0.0.1".into()],
        };
        assert!(open.check_url("http://127.0.0.1:9/hook").is_ok());
        assert_eq!(
            open.check_url("http://127.0.0.2:9/hook"),
            Err(EgressError::NotHttps)
        );
        assert_eq!(open.check_url("https://[::1]/"), Err(EgressError::Refused));
    }

    #[test]
    fn blocks_parse_and_contain() {
        let c: Cidr = "10.0.0.0/8".parse().unwrap();
        assert!(c.contains(ip("10.255.0.1")));
        assert!(c.contains(ip("::ffff:10.0.0.1")));
        assert!(!c.contains(ip("11.0.0.1")));
        let one: Cidr = "::1".parse().unwrap();
        assert!(one.contains(ip("::1")) && !one.contains(ip("::2")));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains(ip("203.0.113.9")));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("example.com".parse::<Cidr>().is_err());
    }

    #[tokio::test]
    async fn names_are_resolved_and_checked_at_each_use() {
        let strict = EgressPolicy::default();
        assert_eq!(strict.resolve("localhost").await, Err(EgressError::Refused));
        let open = EgressPolicy {
            allow: vec!["127.0.0.0/8".parse().unwrap(), "::1".parse().unwrap()],
            http_hosts: Vec::new(),
        };
        let addrs = open.resolve("localhost").await.unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
