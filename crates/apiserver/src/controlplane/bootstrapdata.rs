//! The cluster's bootstrap data, shared through the datastore so that every server started on
//! one datastore serves one cluster (k3s's "bootstrap data" in its HA model:
//! <https://docs.k3s.io/datastore/ha>, <https://docs.k3s.io/cli/token>).
//!
//! The first server on an empty datastore stores the secrets a second server needs — the
//! cluster CA's certificate and key (every serving, client and node certificate chains to it)
//! and the service-account signing key — under [`BOOTSTRAP_KEY`], encrypted with a key derived
//! from the cluster's join token. A server started later on the same datastore with that token
//! (`skiff server --token`, or the same `<data-dir>/token`) decrypts them into its own
//! `<data-dir>/tls` before it loads its PKI, so an admin kubeconfig, a service-account token or a
//! node certificate issued by one server is accepted by every other. Each server still signs
//! its own serving certificate, with its own SANs, by the shared CA. A server whose token does
//! not decrypt the stored data refuses to start and writes nothing.
//!
//! Encryption: AES-256-GCM under a key from PBKDF2-HMAC-SHA256 over the token's secret with a
//! random salt, both from `ring` (already the TLS stack's crypto provider).

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine;
use ring::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use skiff_auth::authn::node_join::JoinToken;
use skiff_store::Backend;

use crate::pki::write_private;

/// The datastore key of the sealed bootstrap data (outside every resource's prefix, so no API
/// request reads it).
pub const BOOTSTRAP_KEY: &str = "/registry/skiff.io/bootstrap";

/// The files of `<data-dir>/tls` every server of a cluster shares.
pub const SHARED_FILES: [&str; 3] = ["ca.crt", "ca.key", "service-account.key"];

/// The certificates a server signs for itself with the CA: issued again when the CA changes.
const LEAF_CERTIFICATES: [&str; 3] = ["serving.crt", "admin.crt", "apiserver-kubelet-client.crt"];

/// PBKDF2 rounds. A generated join token's secret is 128 random bits, which no round count
/// strengthens; the rounds only slow guessing of a token a user chose, and reading the record
/// already takes access to the datastore. k3s seals its bootstrap data with 4,096 rounds of
/// PBKDF2-HMAC-SHA1; more rounds than that, not OWASP's 600,000 for password storage, since
/// every server start seals once (and the test suite starts hundreds of servers).
const PBKDF2_ITERATIONS: u32 = 10_000;

/// The sealed form stored under [`BOOTSTRAP_KEY`] (JSON).
#[derive(Debug, Serialize, Deserialize)]
struct Sealed {
    /// Format version (1).
    version: u32,
    /// PBKDF2 rounds used for this record.
    iterations: u32,
    /// PBKDF2 salt, base64.
    salt: String,
    /// AES-GCM nonce, base64.
    nonce: String,
    /// AES-256-GCM ciphertext and tag of the files' JSON map, base64.
    ciphertext: String,
}

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

fn derive_key(secret: &str, salt: &[u8], iterations: u32) -> Result<LessSafeKey> {
    let rounds = NonZeroU32::new(iterations).context("zero PBKDF2 rounds")?;
    let mut key = [0u8; 32];
    ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA256, rounds, salt, secret.as_bytes(), &mut key);
    let unbound = UnboundKey::new(&AES_256_GCM, &key).map_err(|_| anyhow::anyhow!("AES-256-GCM key"))?;
    Ok(LessSafeKey::new(unbound))
}

/// Encrypts `files` (file name → contents) under `secret`.
///
/// # Errors
/// The system's random source fails.
pub fn seal(secret: &str, files: &BTreeMap<String, String>) -> Result<Vec<u8>> {
    let rng = SystemRandom::new();
    let mut salt = [0u8; 16];
    let mut nonce = [0u8; 12];
    rng.fill(&mut salt).map_err(|_| anyhow::anyhow!("random salt"))?;
    rng.fill(&mut nonce).map_err(|_| anyhow::anyhow!("random nonce"))?;
    let key = derive_key(secret, &salt, PBKDF2_ITERATIONS)?;
    let mut data = serde_json::to_vec(files)?;
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(BOOTSTRAP_KEY), &mut data)
        .map_err(|_| anyhow::anyhow!("sealing the bootstrap data"))?;
    let sealed = Sealed {
        version: 1,
        iterations: PBKDF2_ITERATIONS,
        salt: b64().encode(salt),
        nonce: b64().encode(nonce),
        ciphertext: b64().encode(data),
    };
    Ok(serde_json::to_vec(&sealed)?)
}

/// Decrypts what [`seal`] made.
///
/// # Errors
/// A malformed record, or a `secret` other than the one it was sealed with.
pub fn open(secret: &str, sealed: &[u8]) -> Result<BTreeMap<String, String>> {
    let s: Sealed = serde_json::from_slice(sealed).context("the bootstrap data in the datastore is malformed")?;
    if s.version != 1 {
        bail!("the bootstrap data in the datastore has format version {}, this server reads 1", s.version);
    }
    let salt = b64().decode(&s.salt).context("bootstrap data: salt")?;
    let nonce: [u8; 12] =
        b64().decode(&s.nonce).ok().and_then(|n| n.try_into().ok()).context("bootstrap data: nonce")?;
    let mut data = b64().decode(&s.ciphertext).context("bootstrap data: ciphertext")?;
    let key = derive_key(secret, &salt, s.iterations)?;
    let plain =
        key.open_in_place(Nonce::assume_unique_for_key(nonce), Aad::from(BOOTSTRAP_KEY), &mut data).map_err(|_| {
            anyhow::anyhow!(
                "this datastore already holds a cluster whose token is not the one given: start the server \
                 with --token set to the first server's token (its <data-dir>/token); nothing was written"
            )
        })?;
    serde_json::from_slice(plain).context("bootstrap data: contents")
}

/// The join token this server uses: `token` (`--token`) if given, else `<data-dir>/token`.
fn local_token(data_dir: &Path, token: Option<&str>) -> Result<Option<JoinToken>> {
    if let Some(t) = token {
        return JoinToken::parse(t).map(Some).map_err(|e| anyhow::anyhow!("--token: {e}"));
    }
    match std::fs::read_to_string(super::join::token_path(data_dir)) {
        Ok(text) => JoinToken::parse(&text).map(Some).map_err(anyhow::Error::msg),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).context("reading the join token"),
    }
}

/// Before the PKI is loaded: when the datastore holds bootstrap data, decrypts it with the
/// join token and writes the shared files into `<data-dir>/tls` (removing the certificates
/// this server signed with another CA, so they are issued again), and `--token` into
/// `<data-dir>/token`. Returns whether the datastore had bootstrap data.
///
/// # Errors
/// Bootstrap data but no token, or a token that does not open it: nothing is written. A
/// datastore or file error.
pub async fn adopt(data_dir: &Path, token: Option<&str>, store: &dyn Backend) -> Result<bool> {
    let Some(kv) = store.get(BOOTSTRAP_KEY).await.context("reading the bootstrap data")? else {
        if let Some(t) = token {
            // The first server of a cluster whose token the user chose.
            let parsed = JoinToken::parse(t).map_err(|e| anyhow::anyhow!("--token: {e}"))?;
            let path = super::join::token_path(data_dir);
            if !path.exists() {
                std::fs::create_dir_all(data_dir)?;
                write_private(&path, &format!("{parsed}\n"))?;
            }
        }
        return Ok(false);
    };
    let Some(join) = local_token(data_dir, token)? else {
        bail!(
            "this datastore already holds a cluster: start the server with --token set to the first server's \
             token (its <data-dir>/token); nothing was written"
        );
    };
    let files = open(&join.secret, &kv.value)?;
    let tls = data_dir.join("tls");
    std::fs::create_dir_all(&tls).with_context(|| format!("creating {}", tls.display()))?;
    let old_ca = std::fs::read_to_string(tls.join("ca.crt")).ok();
    let adopted = old_ca.as_deref() != files.get("ca.crt").map(String::as_str);
    if adopted {
        for leaf in LEAF_CERTIFICATES {
            let _ = std::fs::remove_file(tls.join(leaf));
        }
        if old_ca.is_some() {
            tracing::warn!("this data dir's CA is not the cluster's: adopting the cluster's CA from the datastore");
        }
    }
    if !files.contains_key("ca.crt") || !files.contains_key("ca.key") {
        bail!("the bootstrap data in the datastore has no cluster CA");
    }
    for (name, contents) in files.iter().filter(|(name, _)| SHARED_FILES.contains(&name.as_str())) {
        write_private(&tls.join(name), contents)?;
    }
    if token.is_some() {
        write_private(&super::join::token_path(data_dir), &format!("{join}\n"))?;
    }
    if adopted {
        tracing::info!("joined the cluster in the datastore: its CA and service-account key adopted");
    } else {
        // A restart of a server of this cluster (or of its first server).
        tracing::debug!("the datastore's bootstrap data matches this data dir");
    }
    Ok(true)
}

/// After the PKI and the join token exist: stores the shared files, sealed with the token, when
/// the datastore has none yet. Another server that published first wins; this one must then
/// restart to adopt the cluster's data (the error says so).
///
/// # Errors
/// A shared file or the token is unreadable; the datastore fails; another server published
/// different data between [`adopt`] and this call.
pub async fn publish(data_dir: &Path, store: &dyn Backend) -> Result<()> {
    let Some(join) = local_token(data_dir, None)? else { bail!("no join token in {}", data_dir.display()) };
    let tls = data_dir.join("tls");
    let mut files = BTreeMap::new();
    for name in SHARED_FILES {
        let path = tls.join(name);
        match std::fs::read_to_string(&path) {
            Ok(contents) => {
                files.insert(name.to_string(), contents);
            }
            // A server without RBAC has no service-account key to share.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && name == "service-account.key" => {}
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }
    let sealed = seal(&join.secret, &files)?;
    match store.create(BOOTSTRAP_KEY, sealed).await {
        Ok(_) => {
            tracing::info!("stored the cluster's bootstrap data in the datastore");
            Ok(())
        }
        Err(skiff_store::Error::AlreadyExists { .. }) => {
            let stored = store.get(BOOTSTRAP_KEY).await?.context("bootstrap data vanished")?;
            if open(&join.secret, &stored.value)? == files {
                return Ok(());
            }
            bail!("another server stored the cluster's bootstrap data first: restart this server to join that cluster")
        }
        Err(e) => Err(e).context("storing the bootstrap data"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files() -> BTreeMap<String, String> {
        SHARED_FILES.iter().map(|f| (f.to_string(), format!("contents of {f}"))).collect()
    }

    #[test]
    fn sealed_data_opens_with_its_secret_and_not_with_another() {
        let sealed = seal("s3cret", &files()).unwrap();
        assert!(!String::from_utf8_lossy(&sealed).contains("contents of"));
        assert_eq!(open("s3cret", &sealed).unwrap(), files());
        let err = open("other", &sealed).unwrap_err().to_string();
        assert!(err.contains("--token"), "{err}");
    }

    #[test]
    fn a_tampered_record_does_not_open() {
        let mut sealed: serde_json::Value = serde_json::from_slice(&seal("s3cret", &files()).unwrap()).unwrap();
        let mut ct = b64().decode(sealed["ciphertext"].as_str().unwrap()).unwrap();
        ct[0] ^= 1;
        sealed["ciphertext"] = b64().encode(ct).into();
        assert!(open("s3cret", &serde_json::to_vec(&sealed).unwrap()).is_err());
        assert!(open("s3cret", b"not json").is_err());
    }
}
