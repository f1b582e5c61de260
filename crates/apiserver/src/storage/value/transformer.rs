//! Value transformers (k8s.io/apiserver `pkg/storage/value/encrypt/{aes,secretbox,identity}`):
//! each provider's stored form is `k8s:enc:<provider>:v1:<key name>:` followed by
//! - `aescbc`: a random 16-byte IV and the AES-CBC ciphertext of the PKCS #7-padded value;
//! - `aesgcm`: a random 12-byte nonce and the AES-GCM ciphertext and tag, authenticated with the
//!   storage key (a value copied to another key does not decrypt);
//! - `secretbox`: a random 24-byte nonce and the XSalsa20-Poly1305 box.
//!
//! `identity` stores values as they are, without a prefix. Ciphers are RustCrypto's (`aes-gcm`,
//! `aes` with `cbc`, `crypto_secretbox`).

use aes_gcm::aead::{Aead, KeyInit, Payload};
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
use rand::RngCore;

/// One provider with one key (or `identity`).
#[derive(Clone)]
pub enum Transformer {
    /// Values stored as they are.
    Identity,
    /// AES-CBC with PKCS #7 padding.
    AesCbc {
        /// The key's name, part of the stored prefix.
        name: String,
        /// 16, 24 or 32 bytes.
        key: Vec<u8>,
    },
    /// AES-GCM, the storage key as additional data.
    AesGcm {
        /// The key's name.
        name: String,
        /// 16, 24 or 32 bytes.
        key: Vec<u8>,
    },
    /// NaCl secretbox (XSalsa20-Poly1305).
    Secretbox {
        /// The key's name.
        name: String,
        /// 32 bytes.
        key: Vec<u8>,
    },
}

impl std::fmt::Debug for Transformer {
    // Keys never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transformer::Identity => f.write_str("identity"),
            other => write!(f, "{}", String::from_utf8_lossy(&other.prefix())),
        }
    }
}

/// A value a transformer cannot read (wrong key, corrupt bytes).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TransformError(pub String);

impl Transformer {
    /// The stored prefix (`k8s:enc:aesgcm:v1:key1:`); empty for identity.
    pub fn prefix(&self) -> Vec<u8> {
        let (provider, name) = match self {
            Transformer::Identity => return Vec::new(),
            Transformer::AesCbc { name, .. } => ("aescbc", name),
            Transformer::AesGcm { name, .. } => ("aesgcm", name),
            Transformer::Secretbox { name, .. } => ("secretbox", name),
        };
        format!("k8s:enc:{provider}:v1:{name}:").into_bytes()
    }

    /// The stored form of `value` under storage key `key`.
    ///
    /// # Errors
    /// A key of a length the cipher does not take (configuration validation refuses those).
    pub fn to_storage(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, TransformError> {
        let mut out = self.prefix();
        let bad_key = |_| TransformError("invalid key length".into());
        match self {
            Transformer::Identity => out.extend_from_slice(value),
            Transformer::AesCbc { key: k, .. } => {
                let mut iv = [0u8; 16];
                rand::rng().fill_bytes(&mut iv);
                out.extend_from_slice(&iv);
                let ct = match k.len() {
                    16 => cbc::Encryptor::<aes::Aes128>::new_from_slices(k, &iv)
                        .map_err(bad_key)?
                        .encrypt_padded_vec_mut::<Pkcs7>(value),
                    24 => cbc::Encryptor::<aes::Aes192>::new_from_slices(k, &iv)
                        .map_err(bad_key)?
                        .encrypt_padded_vec_mut::<Pkcs7>(value),
                    _ => cbc::Encryptor::<aes::Aes256>::new_from_slices(k, &iv)
                        .map_err(bad_key)?
                        .encrypt_padded_vec_mut::<Pkcs7>(value),
                };
                out.extend_from_slice(&ct);
            }
            Transformer::AesGcm { key: k, .. } => {
                let mut nonce = [0u8; 12];
                rand::rng().fill_bytes(&mut nonce);
                out.extend_from_slice(&nonce);
                let payload = Payload { msg: value, aad: key.as_bytes() };
                let ct = gcm_seal(k, &nonce, payload)?;
                out.extend_from_slice(&ct);
            }
            Transformer::Secretbox { key: k, .. } => {
                use crypto_secretbox::{XSalsa20Poly1305, aead::Aead as _};
                let mut nonce = [0u8; 24];
                rand::rng().fill_bytes(&mut nonce);
                out.extend_from_slice(&nonce);
                let cipher =
                    XSalsa20Poly1305::new_from_slice(k).map_err(|_| TransformError("invalid key length".into()))?;
                let ct = cipher
                    .encrypt(&nonce.into(), value)
                    .map_err(|_| TransformError("secretbox: encryption failed".into()))?;
                out.extend_from_slice(&ct);
            }
        }
        Ok(out)
    }

    /// The value of `stored` (which starts with [`Transformer::prefix`]) under storage key `key`.
    ///
    /// # Errors
    /// Bytes this key did not write, or that were changed.
    pub fn from_storage(&self, key: &str, stored: &[u8]) -> Result<Vec<u8>, TransformError> {
        let body = &stored[self.prefix().len()..];
        let fail = |what: &str| TransformError(format!("{self:?}: {what}"));
        match self {
            Transformer::Identity => Ok(stored.to_vec()),
            Transformer::AesCbc { key: k, .. } => {
                if body.len() < 32 || !body.len().is_multiple_of(16) {
                    return Err(fail("the data is not a multiple of the block size"));
                }
                let (iv, ct) = body.split_at(16);
                let plain = match k.len() {
                    16 => cbc::Decryptor::<aes::Aes128>::new_from_slices(k, iv)
                        .map_err(|_| fail("invalid key length"))?
                        .decrypt_padded_vec_mut::<Pkcs7>(ct),
                    24 => cbc::Decryptor::<aes::Aes192>::new_from_slices(k, iv)
                        .map_err(|_| fail("invalid key length"))?
                        .decrypt_padded_vec_mut::<Pkcs7>(ct),
                    _ => cbc::Decryptor::<aes::Aes256>::new_from_slices(k, iv)
                        .map_err(|_| fail("invalid key length"))?
                        .decrypt_padded_vec_mut::<Pkcs7>(ct),
                };
                plain.map_err(|_| fail("invalid padding on input"))
            }
            Transformer::AesGcm { key: k, .. } => {
                if body.len() < 12 {
                    return Err(fail("the stored data was shorter than the required size"));
                }
                let (nonce, ct) = body.split_at(12);
                gcm_open(k, nonce, Payload { msg: ct, aad: key.as_bytes() })
                    .map_err(|_| fail("cipher: message authentication failed"))
            }
            Transformer::Secretbox { key: k, .. } => {
                use crypto_secretbox::{XSalsa20Poly1305, aead::Aead as _};
                if body.len() < 24 {
                    return Err(fail("the stored data was shorter than the required size"));
                }
                let (nonce, ct) = body.split_at(24);
                let cipher = XSalsa20Poly1305::new_from_slice(k).map_err(|_| fail("invalid key length"))?;
                let nonce: [u8; 24] = nonce.try_into().map_err(|_| fail("nonce"))?;
                cipher.decrypt(&nonce.into(), ct).map_err(|_| fail("output array was not large enough for encryption"))
            }
        }
    }
}

fn gcm_seal(k: &[u8], nonce: &[u8; 12], payload: Payload<'_, '_>) -> Result<Vec<u8>, TransformError> {
    let bad = |_| TransformError("aesgcm: encryption failed".into());
    let n = aes_gcm::Nonce::from_slice(nonce);
    match k.len() {
        16 => aes_gcm::Aes128Gcm::new_from_slice(k)
            .map_err(|_| TransformError("invalid key length".into()))?
            .encrypt(n, payload)
            .map_err(bad),
        24 => aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(k)
            .map_err(|_| TransformError("invalid key length".into()))?
            .encrypt(n, payload)
            .map_err(bad),
        _ => aes_gcm::Aes256Gcm::new_from_slice(k)
            .map_err(|_| TransformError("invalid key length".into()))?
            .encrypt(n, payload)
            .map_err(bad),
    }
}

fn gcm_open(k: &[u8], nonce: &[u8], payload: Payload<'_, '_>) -> Result<Vec<u8>, ()> {
    let n = aes_gcm::Nonce::from_slice(nonce);
    match k.len() {
        16 => aes_gcm::Aes128Gcm::new_from_slice(k).map_err(|_| ())?.decrypt(n, payload).map_err(|_| ()),
        24 => aes_gcm::AesGcm::<aes::Aes192, aes_gcm::aead::consts::U12>::new_from_slice(k)
            .map_err(|_| ())?
            .decrypt(n, payload)
            .map_err(|_| ()),
        _ => aes_gcm::Aes256Gcm::new_from_slice(k).map_err(|_| ())?.decrypt(n, payload).map_err(|_| ()),
    }
}

/// The providers of one resource, in configuration order: writes use the first, reads the first
/// whose prefix the stored value has (identity matches any value).
#[derive(Debug, Clone)]
pub struct PrefixTransformers(pub Vec<Transformer>);

impl PrefixTransformers {
    /// The stored form of `value` (by the first provider).
    ///
    /// # Errors
    /// As [`Transformer::to_storage`].
    pub fn to_storage(&self, key: &str, value: &[u8]) -> Result<Vec<u8>, TransformError> {
        match self.0.first() {
            Some(t) => t.to_storage(key, value),
            None => Ok(value.to_vec()),
        }
    }

    /// The value of `stored`: the provider whose prefix it carries reads it.
    ///
    /// # Errors
    /// No configured provider wrote it (kube-apiserver's "no matching prefix found"), or that
    /// provider cannot read it.
    pub fn from_storage(&self, key: &str, stored: &[u8]) -> Result<Vec<u8>, TransformError> {
        for t in &self.0 {
            if matches!(t, Transformer::Identity) {
                // Identity reads only what no encrypting provider claims.
                if stored.starts_with(b"k8s:enc:") {
                    continue;
                }
                return Ok(stored.to_vec());
            }
            if stored.starts_with(&t.prefix()) {
                return t.from_storage(key, stored);
            }
        }
        Err(TransformError("no matching prefix found".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Transformer> {
        vec![
            Transformer::AesCbc { name: "k1".into(), key: vec![7; 32] },
            Transformer::AesCbc { name: "k16".into(), key: vec![7; 16] },
            Transformer::AesGcm { name: "k2".into(), key: vec![8; 32] },
            Transformer::AesGcm { name: "k24".into(), key: vec![8; 24] },
            Transformer::Secretbox { name: "k3".into(), key: vec![9; 32] },
            Transformer::Identity,
        ]
    }

    #[test]
    fn every_provider_reads_what_it_wrote_behind_kubernetes_prefix() {
        for t in all() {
            let stored = t.to_storage("/registry/secrets/default/s", b"{\"data\":1}").unwrap();
            assert!(stored.starts_with(&t.prefix()), "{t:?}");
            if !matches!(t, Transformer::Identity) {
                assert!(!stored.windows(8).any(|w| w == b"\"data\":1"), "{t:?} stores plain text");
            }
            assert_eq!(t.from_storage("/registry/secrets/default/s", &stored).unwrap(), b"{\"data\":1}", "{t:?}");
        }
    }

    #[test]
    fn an_aesgcm_value_moved_to_another_key_does_not_decrypt() {
        let t = Transformer::AesGcm { name: "k".into(), key: vec![1; 32] };
        let stored = t.to_storage("/registry/secrets/a/x", b"v").unwrap();
        assert!(t.from_storage("/registry/secrets/b/x", &stored).is_err());
    }

    #[test]
    fn reads_pick_the_provider_by_prefix_so_keys_rotate_by_reordering() {
        let old = Transformer::AesCbc { name: "old".into(), key: vec![1; 32] };
        let new = Transformer::AesGcm { name: "new".into(), key: vec![2; 32] };
        let before = PrefixTransformers(vec![old.clone(), Transformer::Identity]);
        let written_old = before.to_storage("k", b"v").unwrap();
        let plain = before.from_storage("k", b"legacy plain").unwrap();
        assert_eq!(plain, b"legacy plain");
        let after = PrefixTransformers(vec![new.clone(), old]);
        assert_eq!(after.from_storage("k", &written_old).unwrap(), b"v");
        assert!(after.to_storage("k", b"v").unwrap().starts_with(b"k8s:enc:aesgcm:v1:new:"));
        // Without identity in the list, unencrypted values are refused, as kube-apiserver does.
        assert_eq!(after.from_storage("k", b"plain").unwrap_err().0, "no matching prefix found");
        // A value of a key no longer listed is refused too.
        assert!(PrefixTransformers(vec![new]).from_storage("k", &written_old).is_err());
    }

    #[test]
    fn tampered_or_truncated_values_are_errors_not_panics() {
        for t in all().into_iter().filter(|t| !matches!(t, Transformer::Identity)) {
            let mut stored = t.to_storage("k", b"value").unwrap();
            // AES-CBC has no authentication tag: only its padding can reveal a change. Flipping the
            // IV's last byte flips the padding byte of the one-block value (11 → 11 ^ 0x55), so
            // the refusal is certain; the AEADs refuse any changed byte, here the tag's last.
            let at = if matches!(t, Transformer::AesCbc { .. }) { t.prefix().len() + 15 } else { stored.len() - 1 };
            stored[at] ^= 0x55;
            assert!(t.from_storage("k", &stored).is_err(), "{t:?} accepted a changed value");
            let prefix_len = t.prefix().len();
            for cut in [prefix_len, prefix_len + 3, prefix_len + 20] {
                let _ = t.from_storage("k", &stored[..cut.min(stored.len())]);
            }
        }
    }
}
