//! ES256 for `jsonwebtoken` backed by `ring` (already the workspace's TLS crypto), installed as
//! jsonwebtoken's process-wide crypto provider — neither its `aws_lc_rs` nor its `rust_crypto`
//! backend (which would bring the `rsa` crate) is compiled in. Only ES256 is supported.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind, new_error};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey};
use ring::rand::SystemRandom;
use ring::signature::{ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, UnparsedPublicKey};

struct Es256Signer(EcdsaKeyPair);

impl jsonwebtoken::signature::Signer<Vec<u8>> for Es256Signer {
    fn try_sign(&self, msg: &[u8]) -> Result<Vec<u8>, jsonwebtoken::signature::Error> {
        let sig = self.0.sign(&SystemRandom::new(), msg).map_err(|_| jsonwebtoken::signature::Error::new())?;
        Ok(sig.as_ref().to_vec())
    }
}

impl JwtSigner for Es256Signer {
    fn algorithm(&self) -> Algorithm {
        Algorithm::ES256
    }
}

/// The public key as an uncompressed SEC1 point (`0x04 || x || y`).
struct Es256Verifier(Vec<u8>);

impl jsonwebtoken::signature::Verifier<Vec<u8>> for Es256Verifier {
    fn verify(&self, msg: &[u8], sig: &Vec<u8>) -> Result<(), jsonwebtoken::signature::Error> {
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, &self.0)
            .verify(msg, sig)
            .map_err(|_| jsonwebtoken::signature::Error::new())
    }
}

impl JwtVerifier for Es256Verifier {
    fn algorithm(&self) -> Algorithm {
        Algorithm::ES256
    }
}

fn new_signer(alg: &Algorithm, key: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    if *alg != Algorithm::ES256 {
        return Err(new_error(ErrorKind::UnsupportedAlgorithm));
    }
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, key.as_bytes(), &SystemRandom::new())
        .map_err(|_| new_error(ErrorKind::InvalidEcdsaKey))?;
    Ok(Box::new(Es256Signer(pair)))
}

fn new_verifier(alg: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    if *alg != Algorithm::ES256 {
        return Err(new_error(ErrorKind::UnsupportedAlgorithm));
    }
    Ok(Box::new(Es256Verifier(key.try_get_as_bytes()?.to_vec())))
}

static PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: new_signer,
    verifier_factory: new_verifier,
    key_utils: KeyUtils::new_unimplemented(),
};

/// Installs the provider unless one is installed already (idempotent, cheap after the first
/// call).
pub(crate) fn ensure_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = PROVIDER.install_default();
    });
}
