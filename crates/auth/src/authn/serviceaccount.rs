//! Service-account tokens
//! (<https://kubernetes.io/docs/reference/access-authn-authz/service-accounts-admin/#bound-service-account-tokens>):
//! ES256-signed JWTs with Kubernetes' claims, issued by [`TokenIssuer`] for the TokenRequest
//! subresource (`kubectl create token`, projected volumes) and verified by
//! [`ServiceAccountTokenAuthenticator`].
//!
//! Claims as Kubernetes writes them:
//! `{"aud": [...], "exp", "iat", "nbf", "iss", "jti", "sub": "system:serviceaccount:<ns>:<name>",
//! "kubernetes.io": {"namespace", "serviceaccount": {"name", "uid"}, "pod"?: {"name", "uid"},
//! "secret"?: {...}, "node"?: {...}}}`. The key id (`kid`) is the unpadded base64url SHA-256 of
//! the public key's DER SubjectPublicKeyInfo, as kube-apiserver computes it. The private key is
//! a P-256 PKCS#8 PEM that the caller persists ([`generate_signing_key_pem`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use rcgen::PublicKeyData;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use skiff_apimachinery::ApiError;
use skiff_apimachinery::status::Cause;

use super::jwt_crypto::ensure_provider;
use super::{AuthnError, TokenAuthenticator};
use crate::user::{self, UserInfo};

/// kube-apiserver's default `--service-account-issuer` (and API audience).
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// Default `spec.expirationSeconds` of a TokenRequest (1 hour).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest token a TokenRequest may ask for (10 minutes).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// Clock skew tolerated on `exp`/`nbf`, seconds.
pub const LEEWAY_SECONDS: u64 = 60;
/// `extra` key: name of the pod a token is bound to.
pub const EXTRA_POD_NAME: &str = "authentication.kubernetes.io/pod-name";
/// `extra` key: uid of the pod a token is bound to.
pub const EXTRA_POD_UID: &str = "authentication.kubernetes.io/pod-uid";
/// `extra` key: name of the node the bound pod runs on.
pub const EXTRA_NODE_NAME: &str = "authentication.kubernetes.io/node-name";
/// `extra` key: uid of that node.
pub const EXTRA_NODE_UID: &str = "authentication.kubernetes.io/node-uid";
/// `extra` key: `JTI=<token id>`.
pub const EXTRA_CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";

/// `{"name", "uid"}` of an object a token names.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ObjectRef {
    /// Object name.
    pub name: String,
    /// Object uid.
    #[serde(default)]
    pub uid: String,
}

/// The `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct KubernetesClaims {
    /// The service account's namespace.
    pub namespace: String,
    /// The service account.
    pub serviceaccount: ObjectRef,
    /// The pod the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<ObjectRef>,
    /// The secret the token is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<ObjectRef>,
    /// The node the token (or its pod) is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<ObjectRef>,
}

/// `aud` as a string or a list (JWT allows both; Kubernetes writes a list).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Audiences {
    /// One audience.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl Audiences {
    /// The audiences as a list.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            Self::One(a) => vec![a.clone()],
            Self::Many(v) => v.clone(),
        }
    }
}

/// A service-account token's claims.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceAccountClaims {
    /// Audiences.
    pub aud: Audiences,
    /// Expiry, Unix seconds.
    pub exp: u64,
    /// Issued at, Unix seconds.
    pub iat: u64,
    /// Not before, Unix seconds.
    pub nbf: u64,
    /// Issuer.
    pub iss: String,
    /// Token id.
    #[serde(default)]
    pub jti: String,
    /// `system:serviceaccount:<ns>:<name>`.
    pub sub: String,
    /// Kubernetes' private claims.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes: KubernetesClaims,
}

/// Generates a new P-256 signing key as PKCS#8 PEM (the caller persists it, e.g. as
/// `<data-dir>/tls/service-account.key`, mode 0600).
///
/// # Errors
/// Key generation fails.
pub fn generate_signing_key_pem() -> Result<String, String> {
    rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map(|k| k.serialize_pem())
        .map_err(|e| format!("generating the service-account signing key: {e}"))
}

/// A public verification key: its `kid` and raw point.
#[derive(Clone)]
struct VerificationKey {
    kid: String,
    point: Vec<u8>,
}

fn key_id(spki_der: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, spki_der))
}

/// A token the issuer produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The JWT.
    pub token: String,
    /// Expiry, Unix seconds.
    pub expiration: u64,
    /// The claims it carries.
    pub claims: ServiceAccountClaims,
}

/// What a token is bound to besides its service account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundObject {
    /// A pod (projected tokens: the token dies with the pod); optionally the node it runs on.
    Pod {
        /// The pod.
        pod: ObjectRef,
        /// The node the pod is bound to, when scheduled.
        node: Option<ObjectRef>,
    },
    /// A secret.
    Secret(ObjectRef),
    /// A node.
    Node(ObjectRef),
}

/// Signs service-account tokens.
#[derive(Clone)]
pub struct TokenIssuer {
    issuer: String,
    api_audiences: Vec<String>,
    encoding: EncodingKey,
    key: VerificationKey,
}

impl std::fmt::Debug for TokenIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenIssuer").field("issuer", &self.issuer).field("kid", &self.key.kid).finish()
    }
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

/// A random RFC 4122 version-4 UUID string.
pub fn random_uuid() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    format_uuid(&b)
}

/// `b` in the UUID text form `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (lower-case hex), written
/// into one string (UIDs are made on every create).
pub fn format_uuid(b: &[u8; 16]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, x) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(HEX[usize::from(x >> 4)] as char);
        s.push(HEX[usize::from(x & 0x0f)] as char);
    }
    s
}

impl TokenIssuer {
    /// An issuer named `issuer` (`--service-account-issuer`) signing with the P-256 PKCS#8 PEM
    /// key `key_pem`; tokens requested without audiences get `api_audiences`
    /// (`--api-audiences`, by default the issuer).
    ///
    /// # Errors
    /// The key is not a P-256 private key.
    pub fn new(issuer: &str, api_audiences: Vec<String>, key_pem: &str) -> Result<Self, String> {
        let pair = rcgen::KeyPair::from_pem(key_pem).map_err(|e| format!("parsing the signing key: {e}"))?;
        if !pair.is_compatible(&rcgen::PKCS_ECDSA_P256_SHA256) {
            return Err("the service-account signing key must be an ECDSA P-256 key".into());
        }
        let key =
            VerificationKey { kid: key_id(&pair.subject_public_key_info()), point: pair.public_key_raw().to_vec() };
        let api_audiences = if api_audiences.is_empty() { vec![issuer.to_string()] } else { api_audiences };
        Ok(Self {
            issuer: issuer.to_string(),
            api_audiences,
            encoding: EncodingKey::from_ec_der(&pair.serialize_der()),
            key,
        })
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences tokens get when a TokenRequest names none.
    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    /// Signs a token for service account `namespace/name` (uid `uid`), valid for
    /// `expiration_seconds` from `now` (Unix seconds).
    ///
    /// # Errors
    /// Signing fails.
    #[allow(clippy::too_many_arguments)]
    pub fn issue_at(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: &[String],
        expiration_seconds: u64,
        bound: Option<&BoundObject>,
        now: u64,
    ) -> Result<IssuedToken, String> {
        ensure_provider();
        let mut k8s = KubernetesClaims {
            namespace: namespace.to_string(),
            serviceaccount: ObjectRef { name: name.to_string(), uid: uid.to_string() },
            ..Default::default()
        };
        match bound {
            Some(BoundObject::Pod { pod, node }) => {
                k8s.pod = Some(pod.clone());
                k8s.node = node.clone();
            }
            Some(BoundObject::Secret(s)) => k8s.secret = Some(s.clone()),
            Some(BoundObject::Node(n)) => k8s.node = Some(n.clone()),
            None => {}
        }
        let audiences = if audiences.is_empty() { self.api_audiences.clone() } else { audiences.to_vec() };
        let claims = ServiceAccountClaims {
            aud: Audiences::Many(audiences),
            exp: now + expiration_seconds,
            iat: now,
            nbf: now,
            iss: self.issuer.clone(),
            jti: random_uuid(),
            sub: user::service_account_username(namespace, name),
            kubernetes: k8s,
        };
        let mut header = Header::new(Algorithm::ES256);
        header.kid = Some(self.key.kid.clone());
        let token =
            jsonwebtoken::encode(&header, &claims, &self.encoding).map_err(|e| format!("signing token: {e}"))?;
        Ok(IssuedToken { token, expiration: claims.exp, claims })
    }

    /// [`issue_at`](Self::issue_at) now.
    ///
    /// # Errors
    /// Signing fails.
    pub fn issue(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        audiences: &[String],
        expiration_seconds: u64,
        bound: Option<&BoundObject>,
    ) -> Result<IssuedToken, String> {
        self.issue_at(namespace, name, uid, audiences, expiration_seconds, bound, now_secs())
    }

    /// An authenticator for this issuer's tokens accepting `audiences` (empty: the API
    /// audiences).
    pub fn authenticator(&self, audiences: Vec<String>) -> ServiceAccountTokenAuthenticator {
        let audiences = if audiences.is_empty() { self.api_audiences.clone() } else { audiences };
        ServiceAccountTokenAuthenticator {
            issuers: vec![self.issuer.clone()],
            audiences,
            keys: vec![self.key.clone()],
            getter: None,
        }
    }

    /// The JSON Web Key Set served at `/openid/v1/jwks` (ServiceAccountIssuerDiscovery).
    pub fn jwks(&self) -> Value {
        let p = &self.key.point;
        let (x, y) = if p.len() == 65 { (&p[1..33], &p[33..65]) } else { (&p[..0], &p[..0]) };
        json!({"keys": [{
            "use": "sig", "kty": "EC", "kid": self.key.kid, "crv": "P-256", "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(x), "y": URL_SAFE_NO_PAD.encode(y),
        }]})
    }

    /// The OpenID provider configuration served at `/.well-known/openid-configuration`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }
}

/// What token validation checks against the API: that the service account, and the pod,
/// secret or node a token is bound to, still exist with the uid in the token and are not being
/// deleted (Kubernetes' `--service-account-lookup`). Objects are returned as JSON.
pub trait ServiceAccountTokenGetter: Send + Sync {
    /// `namespace/name` ServiceAccount.
    fn service_account(&self, namespace: &str, name: &str) -> Option<Value>;
    /// `namespace/name` Pod.
    fn pod(&self, namespace: &str, name: &str) -> Option<Value>;
    /// `namespace/name` Secret.
    fn secret(&self, namespace: &str, name: &str) -> Option<Value>;
    /// Node `name`.
    fn node(&self, name: &str) -> Option<Value>;
}

fn check_live(kind: &str, obj: Option<Value>, want: &ObjectRef) -> Result<(), AuthnError> {
    let Some(obj) = obj else {
        return Err(AuthnError::new(format!("{kind} {:?} has been deleted", want.name)));
    };
    let uid = obj["metadata"]["uid"].as_str().unwrap_or_default();
    if !want.uid.is_empty() && uid != want.uid {
        return Err(AuthnError::new(format!("{kind} UID ({uid}) does not match claim ({})", want.uid)));
    }
    if !obj["metadata"]["deletionTimestamp"].is_null() {
        return Err(AuthnError::new(format!("{kind} {:?} is being deleted", want.name)));
    }
    Ok(())
}

/// Verifies service-account JWTs.
#[derive(Clone)]
pub struct ServiceAccountTokenAuthenticator {
    issuers: Vec<String>,
    audiences: Vec<String>,
    keys: Vec<VerificationKey>,
    getter: Option<Arc<dyn ServiceAccountTokenGetter>>,
}

impl std::fmt::Debug for ServiceAccountTokenAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountTokenAuthenticator")
            .field("issuers", &self.issuers)
            .field("audiences", &self.audiences)
            .finish()
    }
}

impl ServiceAccountTokenAuthenticator {
    /// Adds another issuer name accepted as `iss` (kube-apiserver accepts several
    /// `--service-account-issuer` values during a rotation).
    pub fn with_issuer(mut self, issuer: &str) -> Self {
        self.issuers.push(issuer.to_string());
        self
    }

    /// Adds another trusted public key (`--service-account-key-file`), as an uncompressed P-256
    /// point or the public half of a PKCS#8 PEM private key.
    ///
    /// # Errors
    /// The PEM is not a P-256 key.
    pub fn with_key_pem(mut self, key_pem: &str) -> Result<Self, String> {
        let pair = rcgen::KeyPair::from_pem(key_pem).map_err(|e| format!("parsing key: {e}"))?;
        self.keys.push(VerificationKey {
            kid: key_id(&pair.subject_public_key_info()),
            point: pair.public_key_raw().to_vec(),
        });
        Ok(self)
    }

    /// Checks the service account and bound objects through `getter` on every request.
    pub fn with_lookup(mut self, getter: Arc<dyn ServiceAccountTokenGetter>) -> Self {
        self.getter = Some(getter);
        self
    }

    /// Verifies a token and returns its claims.
    ///
    /// # Errors
    /// `Ok(None)` is not an error: see [`TokenAuthenticator::authenticate_token`]. Errors name the
    /// failed check (expired, audience, signature, deleted service account, …).
    pub fn verify(&self, token: &str) -> Result<Option<ServiceAccountClaims>, AuthnError> {
        ensure_provider();
        // Not a JWT, or not one of ours: leave it to other token authenticators.
        let Ok(header) = jsonwebtoken::decode_header(token) else { return Ok(None) };
        let Ok(unverified) = jsonwebtoken::dangerous::insecure_decode::<Value>(token) else { return Ok(None) };
        let iss = unverified.claims["iss"].as_str().unwrap_or_default();
        if !self.issuers.iter().any(|i| i == iss) {
            return Ok(None);
        }
        if header.alg != Algorithm::ES256 {
            return Err(AuthnError::new(format!("unsupported token algorithm {:?}", header.alg)));
        }
        let mut validation = Validation::new(Algorithm::ES256);
        validation.leeway = LEEWAY_SECONDS;
        validation.validate_nbf = true;
        validation.set_issuer(&self.issuers);
        validation.set_audience(&self.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let keys = self.keys.iter().filter(|k| header.kid.as_deref().is_none_or(|kid| kid == k.kid));
        let mut last = AuthnError::new("no key matches the token's key id");
        for key in keys {
            match jsonwebtoken::decode::<ServiceAccountClaims>(
                token,
                &DecodingKey::from_ec_der(&key.point),
                &validation,
            ) {
                Ok(data) => {
                    let claims = data.claims;
                    self.check_objects(&claims)?;
                    return Ok(Some(claims));
                }
                Err(e) => {
                    last = AuthnError::new(match e.kind() {
                        ErrorKind::ExpiredSignature => "service account token has expired".to_string(),
                        ErrorKind::ImmatureSignature => "service account token is not valid yet".to_string(),
                        ErrorKind::InvalidAudience => format!(
                            "token audiences {:?} is invalid for the target audiences {:?}",
                            unverified.claims["aud"], self.audiences
                        ),
                        ErrorKind::InvalidSignature => "invalid signature".to_string(),
                        _ => format!("invalid service account token: {e}"),
                    });
                    if !matches!(e.kind(), ErrorKind::InvalidSignature) {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }

    fn check_objects(&self, claims: &ServiceAccountClaims) -> Result<(), AuthnError> {
        let k = &claims.kubernetes;
        if claims.sub != user::service_account_username(&k.namespace, &k.serviceaccount.name) {
            return Err(AuthnError::new("sub claim does not match the kubernetes.io claims"));
        }
        let Some(g) = &self.getter else { return Ok(()) };
        check_live("service account", g.service_account(&k.namespace, &k.serviceaccount.name), &k.serviceaccount)?;
        if let Some(pod) = &k.pod {
            check_live("pod", g.pod(&k.namespace, &pod.name), pod)?;
        }
        if let Some(secret) = &k.secret {
            check_live("secret", g.secret(&k.namespace, &secret.name), secret)?;
        }
        if let (Some(node), None) = (&k.node, &k.pod) {
            check_live("node", g.node(&node.name), node)?;
        }
        Ok(())
    }
}

/// The user a service-account token names.
pub fn user_from_claims(claims: &ServiceAccountClaims) -> UserInfo {
    let k = &claims.kubernetes;
    let mut extra = BTreeMap::new();
    if let Some(pod) = &k.pod {
        extra.insert(EXTRA_POD_NAME.to_string(), vec![pod.name.clone()]);
        extra.insert(EXTRA_POD_UID.to_string(), vec![pod.uid.clone()]);
    }
    if let Some(node) = &k.node {
        extra.insert(EXTRA_NODE_NAME.to_string(), vec![node.name.clone()]);
        if !node.uid.is_empty() {
            extra.insert(EXTRA_NODE_UID.to_string(), vec![node.uid.clone()]);
        }
    }
    if !claims.jti.is_empty() {
        extra.insert(EXTRA_CREDENTIAL_ID.to_string(), vec![format!("JTI={}", claims.jti)]);
    }
    UserInfo {
        name: user::service_account_username(&k.namespace, &k.serviceaccount.name),
        uid: k.serviceaccount.uid.clone(),
        groups: user::service_account_groups(&k.namespace),
        extra,
    }
}

impl TokenAuthenticator for ServiceAccountTokenAuthenticator {
    fn authenticate_token(&self, token: &str) -> Result<Option<UserInfo>, AuthnError> {
        Ok(self.verify(token)?.map(|c| user_from_claims(&c)))
    }
}

fn invalid(field: &str, message: String, name: &str) -> ApiError {
    ApiError::invalid(
        "authentication.k8s.io",
        "TokenRequest",
        name,
        vec![Cause { reason: "FieldValueInvalid".into(), message, field: field.into() }],
    )
}

fn rfc3339(secs: u64) -> Value {
    k8s_openapi::jiff::Timestamp::from_second(secs as i64)
        .map(|t| Value::String(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
        .unwrap_or(Value::Null)
}

/// Serves `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token` (the TokenRequest
/// subresource): `service_account` is the stored ServiceAccount, `request` the posted
/// `authentication.k8s.io/v1` TokenRequest. Defaults `spec.expirationSeconds` to 3600 and
/// `spec.audiences` to the API audiences, caps the lifetime at `max_expiration_seconds`
/// (`--service-account-max-token-expiration`) when set, checks a `spec.boundObjectRef` (Pod,
/// Secret or Node) against `getter`, and answers the TokenRequest with `status.token` and
/// `status.expirationTimestamp`.
///
/// # Errors
/// 422 for a lifetime under 10 minutes or over 2^32 s or an unsupported bound kind, 404 when the
/// bound object does not exist, 409 when its uid differs, 500 when signing fails.
pub fn token_request(
    issuer: &TokenIssuer,
    service_account: &Value,
    request: &Value,
    getter: &dyn ServiceAccountTokenGetter,
    max_expiration_seconds: Option<i64>,
) -> Result<Value, ApiError> {
    let meta = &service_account["metadata"];
    let ns = meta["namespace"].as_str().unwrap_or_default();
    let name = meta["name"].as_str().unwrap_or_default();
    let uid = meta["uid"].as_str().unwrap_or_default();
    let spec = &request["spec"];
    let mut expiration = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION_SECONDS,
        v => v.as_i64().ok_or_else(|| ApiError::bad_request("spec.expirationSeconds must be an integer"))?,
    };
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(invalid(
            "spec.expirationSeconds",
            format!("Invalid value: {expiration}: may not specify a duration less than 10 minutes"),
            name,
        ));
    }
    if expiration > 1 << 32 {
        return Err(invalid(
            "spec.expirationSeconds",
            format!("Invalid value: {expiration}: may not specify a duration larger than 2^32 seconds"),
            name,
        ));
    }
    if let Some(max) = max_expiration_seconds.filter(|m| *m > 0) {
        expiration = expiration.min(max);
    }
    let audiences: Vec<String> = spec["audiences"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let audiences = if audiences.is_empty() { issuer.api_audiences().to_vec() } else { audiences };
    let bound = match spec.get("boundObjectRef").filter(|v| !v.is_null()) {
        None => None,
        Some(r) => {
            let kind = r["kind"].as_str().unwrap_or_default();
            let bname = r["name"].as_str().unwrap_or_default();
            let want_uid = r["uid"].as_str().unwrap_or_default();
            let (resource, obj) = match kind {
                "Pod" => ("pods", getter.pod(ns, bname)),
                "Secret" => ("secrets", getter.secret(ns, bname)),
                "Node" => ("nodes", getter.node(bname)),
                other => {
                    return Err(invalid(
                        "spec.boundObjectRef.kind",
                        format!("Unsupported value: {other:?}: supported values: \"Pod\", \"Secret\", \"Node\""),
                        name,
                    ));
                }
            };
            let obj = obj.ok_or_else(|| ApiError::not_found("", resource, bname))?;
            let actual_uid = obj["metadata"]["uid"].as_str().unwrap_or_default().to_string();
            if !want_uid.is_empty() && want_uid != actual_uid {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {kind} {bname:?}: the UID in the bound object reference ({want_uid}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                ));
            }
            let reference = ObjectRef { name: bname.to_string(), uid: actual_uid };
            Some(match kind {
                "Pod" => {
                    let node_name = obj["spec"]["nodeName"].as_str().unwrap_or_default();
                    let node = if node_name.is_empty() {
                        None
                    } else {
                        let node_uid = getter
                            .node(node_name)
                            .and_then(|n| n["metadata"]["uid"].as_str().map(str::to_string))
                            .unwrap_or_default();
                        Some(ObjectRef { name: node_name.to_string(), uid: node_uid })
                    };
                    BoundObject::Pod { pod: reference, node }
                }
                "Secret" => BoundObject::Secret(reference),
                _ => BoundObject::Node(reference),
            })
        }
    };
    let issued =
        issuer.issue(ns, name, uid, &audiences, expiration as u64, bound.as_ref()).map_err(ApiError::internal)?;
    let mut spec_out = json!({"audiences": audiences, "expirationSeconds": expiration});
    if let Some(r) = spec.get("boundObjectRef").filter(|v| !v.is_null()) {
        spec_out["boundObjectRef"] = r.clone();
    }
    Ok(json!({
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {"name": name, "namespace": ns, "creationTimestamp": rfc3339(issued.claims.iat)},
        "spec": spec_out,
        "status": {"token": issued.token, "expirationTimestamp": rfc3339(issued.expiration)},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issuer() -> TokenIssuer {
        TokenIssuer::new(DEFAULT_ISSUER, vec![], &generate_signing_key_pem().unwrap()).unwrap()
    }

    #[test]
    fn uuids_are_written_as_lower_case_hex_groups_of_8_4_4_4_12() {
        let b = [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10];
        assert_eq!(format_uuid(&b), "01234567-89ab-cdef-fedc-ba9876543210");
        let u = random_uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        assert!(matches!(&u[19..20], "8" | "9" | "a" | "b"));
    }

    #[derive(Default)]
    struct Objects(BTreeMap<String, Value>);
    impl ServiceAccountTokenGetter for Objects {
        fn service_account(&self, ns: &str, name: &str) -> Option<Value> {
            self.0.get(&format!("sa/{ns}/{name}")).cloned()
        }
        fn pod(&self, ns: &str, name: &str) -> Option<Value> {
            self.0.get(&format!("pod/{ns}/{name}")).cloned()
        }
        fn secret(&self, ns: &str, name: &str) -> Option<Value> {
            self.0.get(&format!("secret/{ns}/{name}")).cloned()
        }
        fn node(&self, name: &str) -> Option<Value> {
            self.0.get(&format!("node/{name}")).cloned()
        }
    }

    fn meta(name: &str, uid: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default", "uid": uid}})
    }

    #[test]
    fn issued_tokens_verify_into_the_service_account_user() {
        let iss = issuer();
        let bound = BoundObject::Pod { pod: ObjectRef { name: "web".into(), uid: "pod-1".into() }, node: None };
        let t = iss.issue("default", "builder", "sa-1", &[], 3600, Some(&bound)).unwrap();
        let auth = iss.authenticator(vec![]);
        let user = auth.authenticate_token(&t.token).unwrap().unwrap();
        assert_eq!(user.name, "system:serviceaccount:default:builder");
        assert_eq!(user.uid, "sa-1");
        assert_eq!(user.groups, vec!["system:serviceaccounts", "system:serviceaccounts:default"]);
        assert_eq!(user.extra[EXTRA_POD_NAME], vec!["web"]);
        assert_eq!(user.extra[EXTRA_POD_UID], vec!["pod-1"]);
        assert!(user.extra[EXTRA_CREDENTIAL_ID][0].starts_with("JTI="));
        // The payload carries Kubernetes' claim layout.
        let claims: Value = jsonwebtoken::dangerous::insecure_decode_claims(&t.token).unwrap();
        assert_eq!(claims["kubernetes.io"]["serviceaccount"], json!({"name": "builder", "uid": "sa-1"}));
        assert_eq!(claims["aud"], json!([DEFAULT_ISSUER]));
        assert_eq!(claims["sub"], "system:serviceaccount:default:builder");
        assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 3600);
        let header = jsonwebtoken::decode_header(&t.token).unwrap();
        assert_eq!(header.alg, Algorithm::ES256);
        assert_eq!(iss.jwks()["keys"][0]["kid"], header.kid.unwrap());
    }

    #[test]
    fn expired_future_and_wrong_audience_tokens_are_rejected() {
        let iss = issuer();
        let now = now_secs();
        let auth = iss.authenticator(vec![]);
        let expired = iss.issue_at("default", "sa", "u", &[], 600, None, now - 3600).unwrap();
        assert_eq!(
            auth.authenticate_token(&expired.token).unwrap_err().reasons,
            vec!["service account token has expired"]
        );
        // Within the leeway, an expired token still passes.
        let recent = iss.issue_at("default", "sa", "u", &[], 600, None, now - 630).unwrap();
        assert!(auth.authenticate_token(&recent.token).unwrap().is_some());
        let future = iss.issue_at("default", "sa", "u", &[], 600, None, now + 3600).unwrap();
        assert!(auth.authenticate_token(&future.token).is_err());
        let other_aud = iss.issue("default", "sa", "u", &["vault".to_string()], 600, None).unwrap();
        let e = auth.authenticate_token(&other_aud.token).unwrap_err();
        assert!(e.reasons[0].contains("is invalid for the target audiences"), "{e}");
        assert!(iss.authenticator(vec!["vault".into()]).authenticate_token(&other_aud.token).unwrap().is_some());
    }

    #[test]
    fn tokens_from_other_keys_or_issuers_are_not_accepted() {
        let iss = issuer();
        let other_key = issuer();
        let t = other_key.issue("default", "sa", "u", &[], 600, None).unwrap();
        assert!(iss.authenticator(vec![]).authenticate_token(&t.token).is_err());
        let foreign = TokenIssuer::new("https://elsewhere", vec![], &generate_signing_key_pem().unwrap()).unwrap();
        let t = foreign.issue("default", "sa", "u", &[], 600, None).unwrap();
        // Another issuer's JWT is not this authenticator's business.
        assert_eq!(iss.authenticator(vec![]).authenticate_token(&t.token).unwrap(), None);
        assert_eq!(iss.authenticator(vec![]).authenticate_token("not-a-jwt").unwrap(), None);
        // Tampering breaks the signature.
        let t = iss.issue("default", "sa", "u", &[], 600, None).unwrap();
        let mut parts: Vec<String> = t.token.split('.').map(str::to_string).collect();
        let mut claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&parts[1]).unwrap()).unwrap();
        claims["sub"] = "system:serviceaccount:kube-system:admin".into();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&claims).unwrap());
        assert!(iss.authenticator(vec![]).authenticate_token(&parts.join(".")).is_err());
        assert!(TokenIssuer::new("x", vec![], "garbage").is_err());
    }

    #[test]
    fn lookup_rejects_tokens_of_deleted_or_recreated_objects() {
        let iss = issuer();
        let mut objects = Objects::default();
        objects.0.insert("sa/default/builder".into(), meta("builder", "sa-1"));
        objects.0.insert("pod/default/web".into(), meta("web", "pod-1"));
        let objects = Arc::new(objects);
        let auth = iss.authenticator(vec![]).with_lookup(objects.clone());
        let pod = |uid: &str| BoundObject::Pod { pod: ObjectRef { name: "web".into(), uid: uid.into() }, node: None };
        let ok = iss.issue("default", "builder", "sa-1", &[], 600, Some(&pod("pod-1"))).unwrap();
        assert!(auth.authenticate_token(&ok.token).unwrap().is_some());
        let recreated_sa = iss.issue("default", "builder", "sa-0", &[], 600, None).unwrap();
        assert!(auth.authenticate_token(&recreated_sa.token).is_err());
        let old_pod = iss.issue("default", "builder", "sa-1", &[], 600, Some(&pod("pod-0"))).unwrap();
        assert!(auth.authenticate_token(&old_pod.token).is_err());
        let missing = iss.issue("default", "ghost", "sa-9", &[], 600, None).unwrap();
        assert!(auth.authenticate_token(&missing.token).is_err());
    }

    #[test]
    fn token_requests_validate_default_and_bind() {
        let iss = issuer();
        let mut objects = Objects::default();
        objects.0.insert(
            "pod/default/web".into(),
            json!({"metadata": {"name": "web", "uid": "pod-1"}, "spec": {"nodeName": "n1"}}),
        );
        objects.0.insert("node/n1".into(), json!({"metadata": {"name": "n1", "uid": "node-1"}}));
        let sa = meta("builder", "sa-1");
        let resp = token_request(&iss, &sa, &json!({"spec": {}}), &objects, None).unwrap();
        assert_eq!(resp["kind"], "TokenRequest");
        assert_eq!(resp["spec"]["expirationSeconds"], 3600);
        assert_eq!(resp["spec"]["audiences"], json!([DEFAULT_ISSUER]));
        let token = resp["status"]["token"].as_str().unwrap();
        assert!(iss.authenticator(vec![]).authenticate_token(token).unwrap().is_some());
        let ts = resp["status"]["expirationTimestamp"].as_str().unwrap();
        assert!(ts.ends_with('Z') && ts.len() == 20, "{ts}");

        let short = token_request(&iss, &sa, &json!({"spec": {"expirationSeconds": 60}}), &objects, None).unwrap_err();
        assert_eq!(short.code, 422);
        assert_eq!(
            short.message,
            "TokenRequest.authentication.k8s.io \"builder\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
        );
        let capped =
            token_request(&iss, &sa, &json!({"spec": {"expirationSeconds": 86400}}), &objects, Some(7200)).unwrap();
        assert_eq!(capped["spec"]["expirationSeconds"], 7200);

        let bound =
            json!({"spec": {"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "pod-1"}}});
        let resp = token_request(&iss, &sa, &bound, &objects, None).unwrap();
        let user =
            iss.authenticator(vec![]).authenticate_token(resp["status"]["token"].as_str().unwrap()).unwrap().unwrap();
        assert_eq!(user.extra[EXTRA_NODE_NAME], vec!["n1"]);
        assert_eq!(user.extra[EXTRA_NODE_UID], vec!["node-1"]);
        let stale = json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": "web", "uid": "pod-0"}}});
        assert_eq!(token_request(&iss, &sa, &stale, &objects, None).unwrap_err().code, 409);
        let missing = json!({"spec": {"boundObjectRef": {"kind": "Pod", "name": "gone"}}});
        assert_eq!(token_request(&iss, &sa, &missing, &objects, None).unwrap_err().code, 404);
        let wrong = json!({"spec": {"boundObjectRef": {"kind": "ConfigMap", "name": "x"}}});
        assert_eq!(token_request(&iss, &sa, &wrong, &objects, None).unwrap_err().code, 422);
    }

    #[test]
    fn discovery_documents_describe_the_key() {
        let iss = issuer();
        let jwks = iss.jwks();
        let key = &jwks["keys"][0];
        assert_eq!(key["kty"], "EC");
        assert_eq!(key["crv"], "P-256");
        assert_eq!(URL_SAFE_NO_PAD.decode(key["x"].as_str().unwrap()).unwrap().len(), 32);
        assert_eq!(iss.openid_configuration()["jwks_uri"], format!("{DEFAULT_ISSUER}/openid/v1/jwks"));
    }
}
