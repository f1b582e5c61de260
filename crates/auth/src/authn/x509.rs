//! X.509 client-certificate authentication
//! (<https://kubernetes.io/docs/reference/access-authn-authz/authentication/#x509-client-certificates>):
//! a certificate chain that verifies against the cluster CA for client authentication names
//! the user by its subject's CommonName and the groups by its Organization values.

use std::sync::Arc;

use rustls::RootCertStore;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::ClientCertVerifier;

use super::{Authenticator, AuthnError, AuthnRequest};
use crate::user::UserInfo;

/// Verifies client certificates against a CA bundle.
#[derive(Clone)]
pub struct X509Authenticator {
    verifier: Arc<dyn ClientCertVerifier>,
}

impl std::fmt::Debug for X509Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("X509Authenticator")
    }
}

impl X509Authenticator {
    /// An authenticator trusting the PEM certificates in `ca_pem` (`--client-ca-file`).
    ///
    /// # Errors
    /// The bundle holds no usable certificate.
    pub fn new(ca_pem: &str) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| format!("reading the client CA bundle: {e}"))?;
            roots.add(cert).map_err(|e| format!("adding a client CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("the client CA bundle holds no certificate".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("building the client certificate verifier: {e}"))?;
        Ok(Self { verifier })
    }

    /// Verifies a chain (leaf first) at `now` and returns its user.
    ///
    /// # Errors
    /// The chain does not verify (unknown issuer, expired, not for client authentication) or
    /// the certificate has no CommonName.
    pub fn verify(&self, chain: &[CertificateDer<'static>], now: UnixTime) -> Result<UserInfo, AuthnError> {
        let (leaf, intermediates) =
            chain.split_first().ok_or_else(|| AuthnError::new("no client certificate presented"))?;
        self.verifier
            .verify_client_cert(leaf, intermediates, now)
            .map_err(|e| AuthnError::new(format!("verifying certificate: {e}")))?;
        user_from_certificate(leaf)
    }
}

impl Authenticator for X509Authenticator {
    fn authenticate(&self, req: &AuthnRequest<'_>) -> Result<Option<UserInfo>, AuthnError> {
        if req.client_certificates.is_empty() {
            return Ok(None);
        }
        self.verify(req.client_certificates, UnixTime::now()).map(Some)
    }
}

/// The user a (verified) certificate names: CN → name, every O → a group.
///
/// # Errors
/// The certificate does not parse or has an empty CommonName.
pub fn user_from_certificate(der: &[u8]) -> Result<UserInfo, AuthnError> {
    let (_, cert) =
        x509_parser::parse_x509_certificate(der).map_err(|e| AuthnError::new(format!("parsing certificate: {e}")))?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next().and_then(|cn| cn.as_str().ok()).unwrap_or_default().to_string();
    if name.is_empty() {
        return Err(AuthnError::new("common name of the certificate is empty"));
    }
    let groups = subject.iter_organization().filter_map(|o| o.as_str().ok().map(str::to_string)).collect();
    Ok(UserInfo { name, groups, ..Default::default() })
}

#[cfg(test)]
pub(crate) mod tests {
    use rcgen::{
        BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };

    use super::*;

    /// A CA as (cert PEM, key PEM).
    pub(crate) fn test_ca(cn: &str) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, cn);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A client certificate signed by the CA, DER.
    pub(crate) fn client_cert(ca: &(String, String), cn: &str, orgs: &[&str], eku: ExtendedKeyUsagePurpose) -> Vec<u8> {
        let issuer = Issuer::from_ca_cert_pem(&ca.0, KeyPair::from_pem(&ca.1).unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for o in orgs {
            dn.push(DnType::OrganizationName, *o);
        }
        if !cn.is_empty() {
            dn.push(DnType::CommonName, cn);
        }
        params.distinguished_name = dn;
        params.extended_key_usages = vec![eku];
        params.signed_by(&key, &issuer).unwrap().der().to_vec()
    }

    #[test]
    fn certificates_from_the_cluster_ca_name_user_and_groups() {
        let ca = test_ca("cluster-ca");
        let auth = X509Authenticator::new(&ca.0).unwrap();
        // rcgen keeps one value per attribute type, so one O here; every O becomes a group.
        let der = client_cert(&ca, "jane", &["dev"], ExtendedKeyUsagePurpose::ClientAuth);
        let chain = vec![CertificateDer::from(der)];
        let headers = hyper::HeaderMap::new();
        let req = AuthnRequest { headers: &headers, path: "/api", client_certificates: &chain };
        let user = auth.authenticate(&req).unwrap().unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.groups, vec!["dev"]);
    }

    #[test]
    fn certificates_from_another_ca_or_for_servers_are_rejected() {
        let ca = test_ca("cluster-ca");
        let other = test_ca("other-ca");
        let auth = X509Authenticator::new(&ca.0).unwrap();
        let headers = hyper::HeaderMap::new();
        for der in [
            client_cert(&other, "jane", &[], ExtendedKeyUsagePurpose::ClientAuth),
            client_cert(&ca, "jane", &[], ExtendedKeyUsagePurpose::ServerAuth),
            client_cert(&ca, "", &["dev"], ExtendedKeyUsagePurpose::ClientAuth),
        ] {
            let chain = vec![CertificateDer::from(der)];
            let req = AuthnRequest { headers: &headers, path: "/api", client_certificates: &chain };
            assert!(auth.authenticate(&req).is_err());
        }
        let req = AuthnRequest { headers: &headers, path: "/api", client_certificates: &[] };
        assert_eq!(auth.authenticate(&req).unwrap(), None);
        assert!(X509Authenticator::new("not pem").is_err());
    }
}
