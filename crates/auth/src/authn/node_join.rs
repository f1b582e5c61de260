//! Node join, k3s-style: `skiff server` creates a join token; `skiff agent --token` exchanges
//! it for a node client certificate (user `system:node:<name>`, group `system:nodes`) so agents
//! on other machines join over TLS without copying keys around.
//!
//! Token format: `K10<sha256 of the CA certificate PEM, hex>::node:<secret>` (k3s' "secure"
//! token format). The hash lets a new agent pin the server's CA before trusting it; the secret
//! proves the agent was given the token.
//!
//! Exchange (endpoints the API server exposes; the functions here do the work):
//! 1. `GET /cacerts` (no authentication): the CA bundle PEM. The agent checks it with
//!    [`JoinToken::verify_ca`] and from then on verifies the server against it.
//! 2. `POST /v1-skiff/node-certificate` with `Authorization: Bearer <secret>` and a JSON
//!    [`NodeJoinRequest`] (`{"nodeName": …, "csr": <PEM PKCS#10>}`), built by the agent with
//!    [`build_join_request`] — the private key never leaves the agent. The server answers with
//!    [`handle_node_join`]: a [`NodeJoinResponse`] holding the certificate signed by the cluster
//!    CA (subject forced to `CN=system:node:<name>, O=system:nodes`, client-auth usage, 1 year)
//!    and the CA bundle.
//! 3. The agent talks to the API server with that certificate; the Node authorizer
//!    ([`crate::node`]) and NodeRestriction admission grant it the kubelet's permissions on its
//!    own Node and the pods bound to it.
//!
//! An agent running simulated nodes (`skiff agent --simulated-nodes N`) sets
//! [`NodeJoinRequest::simulated`]: it manages many Nodes under one credential, so it gets the
//! identity `CN=system:skiff:simulated-node-agent:<name>, O=system:skiff:simulated-node-agents`
//! instead, which RBAC binds to the bootstrap `system:skiff:simulated-node-agent` ClusterRole.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rcgen::{
    CertificateParams, CertificateSigningRequestParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer,
    KeyPair, KeyUsagePurpose,
};
use serde::{Deserialize, Serialize};
use skiff_apimachinery::ApiError;

use crate::user::{NODE_USER_PREFIX, NODES_GROUP, SIMULATED_NODE_AGENT_PREFIX, SIMULATED_NODE_AGENTS_GROUP};

/// The user and group a join certificate names: `(system:node:<name>, system:nodes)`, or for a
/// simulated-node agent `(system:skiff:simulated-node-agent:<name>,
/// system:skiff:simulated-node-agents)`.
pub fn join_identity(node_name: &str, simulated: bool) -> (String, &'static str) {
    if simulated {
        (format!("{SIMULATED_NODE_AGENT_PREFIX}{node_name}"), SIMULATED_NODE_AGENTS_GROUP)
    } else {
        (format!("{NODE_USER_PREFIX}{node_name}"), NODES_GROUP)
    }
}

/// Prefix of the secure token format.
pub const TOKEN_PREFIX: &str = "K10";
/// Validity of node client certificates, days.
pub const NODE_CERT_VALIDITY_DAYS: u64 = 365;

/// A parsed join token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinToken {
    /// Hex SHA-256 of the CA certificate PEM the agent should see; `None` for a bare secret.
    pub ca_hash: Option<String>,
    /// The shared secret.
    pub secret: String,
}

/// Hex SHA-256 of a CA bundle PEM, as embedded in join tokens.
pub fn ca_hash(ca_pem: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, ca_pem.as_bytes()).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares two secrets in time independent of where they differ.
pub fn secrets_match(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl JoinToken {
    /// A new token for the cluster CA `ca_pem` with a random 128-bit secret.
    pub fn generate(ca_pem: &str) -> Self {
        let secret: [u8; 16] = rand::random();
        Self { ca_hash: Some(ca_hash(ca_pem)), secret: secret.iter().map(|b| format!("{b:02x}")).collect() }
    }

    /// Parses `K10<hash>::node:<secret>` (or `K10<hash>::<secret>`), or a bare secret.
    ///
    /// # Errors
    /// A `K10` token with a malformed hash or an empty secret.
    pub fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let Some(rest) = s.strip_prefix(TOKEN_PREFIX) else {
            if s.is_empty() {
                return Err("empty join token".into());
            }
            return Ok(Self { ca_hash: None, secret: s.to_string() });
        };
        let (hash, creds) = rest.split_once("::").ok_or("join token: missing '::' after the CA hash")?;
        if hash.len() != 64 || !hash.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err("join token: the CA hash must be 64 hex digits".into());
        }
        let secret = match creds.split_once(':') {
            Some((_user, secret)) => secret,
            None => creds,
        };
        if secret.is_empty() {
            return Err("join token: empty secret".into());
        }
        Ok(Self { ca_hash: Some(hash.to_ascii_lowercase()), secret: secret.to_string() })
    }

    /// Checks the CA bundle a server presented against the token's hash (always passes for a
    /// bare secret, which pins nothing).
    ///
    /// # Errors
    /// The hash differs: the agent must not trust that server.
    pub fn verify_ca(&self, ca_pem: &str) -> Result<(), String> {
        match &self.ca_hash {
            Some(h) if *h != ca_hash(ca_pem) => {
                Err(format!("the server's CA (sha256 {}) does not match the join token's ({h})", ca_hash(ca_pem)))
            }
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for JoinToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.ca_hash {
            Some(h) => write!(f, "{TOKEN_PREFIX}{h}::node:{}", self.secret),
            None => f.write_str(&self.secret),
        }
    }
}

/// The agent's request for a node certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeJoinRequest {
    /// The node's name (a DNS-1123 subdomain).
    pub node_name: String,
    /// PEM PKCS#10 certificate signing request for the agent's key.
    pub csr: String,
    /// An agent of simulated nodes asks for the simulated-node agent identity
    /// ([`join_identity`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulated: bool,
}

/// The server's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeJoinResponse {
    /// PEM client certificate for `system:node:<name>`.
    pub certificate: String,
    /// PEM CA bundle to verify the API server with.
    pub ca: String,
}

/// Agent side: a new P-256 key and a CSR for `system:node:<node_name>`; returns the request and
/// the private key PEM (keep it, mode 0600).
///
/// # Errors
/// Key generation or CSR encoding fails.
pub fn build_join_request(node_name: &str) -> Result<(NodeJoinRequest, String), String> {
    let key = KeyPair::generate().map_err(|e| format!("generating the node key: {e}"))?;
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, NODES_GROUP);
    dn.push(DnType::CommonName, format!("{NODE_USER_PREFIX}{node_name}"));
    params.distinguished_name = dn;
    let csr = params
        .serialize_request(&key)
        .and_then(|c| c.pem())
        .map_err(|e| format!("encoding the certificate signing request: {e}"))?;
    Ok((NodeJoinRequest { node_name: node_name.to_string(), csr, simulated: false }, key.serialize_pem()))
}

/// Server side: signs the CSR in `request` with the cluster CA as a node client certificate.
/// Whatever subject the CSR asks for, the certificate says `CN=system:node:<nodeName>,
/// O=system:nodes` (or the simulated-node agent identity, [`join_identity`]).
///
/// # Errors
/// 400 for an invalid node name or a CSR that does not parse or whose signature does not
/// verify; 500 when the CA cannot sign.
pub fn sign_node_certificate(
    ca_cert_pem: &str,
    ca_key_pem: &str,
    request: &NodeJoinRequest,
) -> Result<NodeJoinResponse, ApiError> {
    let problems = skiff_apimachinery::names::is_dns1123_subdomain(&request.node_name);
    if !problems.is_empty() {
        return Err(ApiError::bad_request(format!(
            "invalid node name {:?}: {}",
            request.node_name,
            problems.join(", ")
        )));
    }
    let mut csr = CertificateSigningRequestParams::from_pem(&request.csr)
        .map_err(|e| ApiError::bad_request(format!("invalid certificate signing request: {e}")))?;
    let ca_key = KeyPair::from_pem(ca_key_pem).map_err(|e| ApiError::internal(format!("parsing the CA key: {e}")))?;
    let issuer = Issuer::from_ca_cert_pem(ca_cert_pem, ca_key)
        .map_err(|e| ApiError::internal(format!("parsing the CA certificate: {e}")))?;
    let mut dn = DistinguishedName::new();
    let (user, group) = join_identity(&request.node_name, request.simulated);
    dn.push(DnType::OrganizationName, group);
    dn.push(DnType::CommonName, user);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let to_time = |d: Duration| rcgen::date_time_ymd(1970, 1, 1) + Duration::from_secs(d.as_secs());
    let p = &mut csr.params;
    p.distinguished_name = dn;
    p.subject_alt_names = Vec::new();
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    p.use_authority_key_identifier_extension = true;
    p.not_before = to_time(now.saturating_sub(Duration::from_secs(300)));
    p.not_after = to_time(now + Duration::from_secs(NODE_CERT_VALIDITY_DAYS * 24 * 3600));
    let cert = csr.signed_by(&issuer).map_err(|e| ApiError::internal(format!("signing the node certificate: {e}")))?;
    Ok(NodeJoinResponse { certificate: cert.pem(), ca: ca_cert_pem.to_string() })
}

/// Server side, the whole endpoint: checks the presented secret against the server's token,
/// then signs.
///
/// # Errors
/// 401 when the secret is wrong; otherwise as [`sign_node_certificate`].
pub fn handle_node_join(
    token: &JoinToken,
    presented_secret: &str,
    ca_cert_pem: &str,
    ca_key_pem: &str,
    request: &NodeJoinRequest,
) -> Result<NodeJoinResponse, ApiError> {
    if !secrets_match(&token.secret, presented_secret) {
        return Err(ApiError::unauthorized());
    }
    sign_node_certificate(ca_cert_pem, ca_key_pem, request)
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    use super::*;
    use crate::authn::x509::X509Authenticator;
    use crate::authn::x509::tests::test_ca;

    #[test]
    fn join_tokens_round_trip_and_pin_the_ca() {
        let ca = test_ca("cluster-ca");
        let t = JoinToken::generate(&ca.0);
        let s = t.to_string();
        assert!(s.starts_with("K10") && s.contains("::node:"), "{s}");
        let parsed = JoinToken::parse(&s).unwrap();
        assert_eq!(parsed, t);
        parsed.verify_ca(&ca.0).unwrap();
        assert!(parsed.verify_ca(&test_ca("impostor").0).is_err());
        assert_eq!(JoinToken::parse("plainsecret").unwrap(), JoinToken { ca_hash: None, secret: "plainsecret".into() });
        for bad in ["", "K10abc::node:x", &format!("K10{}", "a".repeat(64)), &format!("K10{}::node:", "a".repeat(64))] {
            assert!(JoinToken::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_joined_node_authenticates_as_system_node() {
        let ca = test_ca("cluster-ca");
        let token = JoinToken::generate(&ca.0);
        let (req, _key) = build_join_request("worker-1").unwrap();
        assert_eq!(handle_node_join(&token, "wrong", &ca.0, &ca.1, &req).unwrap_err().code, 401);
        let resp = handle_node_join(&token, &token.secret, &ca.0, &ca.1, &req).unwrap();
        let der = CertificateDer::from_pem_slice(resp.certificate.as_bytes()).unwrap();
        let user = X509Authenticator::new(&ca.0).unwrap().verify(&[der], rustls::pki_types::UnixTime::now()).unwrap();
        assert_eq!(user.name, "system:node:worker-1");
        assert_eq!(user.groups, vec!["system:nodes"]);
    }

    #[test]
    fn the_server_forces_the_node_identity_and_rejects_bad_requests() {
        let ca = test_ca("cluster-ca");
        // A CSR asking for system:masters still gets a node certificate.
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::OrganizationName, "system:masters");
        params.distinguished_name.push(DnType::CommonName, "admin");
        let csr = params.serialize_request(&key).unwrap().pem().unwrap();
        let req = NodeJoinRequest { node_name: "n2".into(), csr, simulated: false };
        let resp = sign_node_certificate(&ca.0, &ca.1, &req).unwrap();
        let der = CertificateDer::from_pem_slice(resp.certificate.as_bytes()).unwrap();
        let user = crate::authn::x509::user_from_certificate(&der).unwrap();
        assert_eq!((user.name.as_str(), user.groups), ("system:node:n2", vec!["system:nodes".to_string()]));
        let simulated = NodeJoinRequest { simulated: true, ..req.clone() };
        let resp = sign_node_certificate(&ca.0, &ca.1, &simulated).unwrap();
        let der = CertificateDer::from_pem_slice(resp.certificate.as_bytes()).unwrap();
        let user = crate::authn::x509::user_from_certificate(&der).unwrap();
        assert_eq!(
            (user.name.as_str(), user.groups),
            ("system:skiff:simulated-node-agent:n2", vec!["system:skiff:simulated-node-agents".to_string()])
        );
        let bad_name = NodeJoinRequest { node_name: "Bad_Name".into(), csr: req.csr.clone(), simulated: false };
        assert_eq!(sign_node_certificate(&ca.0, &ca.1, &bad_name).unwrap_err().code, 400);
        let bad_csr = NodeJoinRequest {
            node_name: "n3".into(),
            csr: "-----BEGIN CERTIFICATE REQUEST-----\nAAAA\n-----END CERTIFICATE REQUEST-----\n".into(),
            simulated: false,
        };
        assert_eq!(sign_node_certificate(&ca.0, &ca.1, &bad_csr).unwrap_err().code, 400);
        assert!(secrets_match("abc", "abc") && !secrets_match("abc", "abd") && !secrets_match("abc", "ab"));
    }
}
