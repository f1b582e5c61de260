//! `--encryption-provider-config`: the `apiserver.config.k8s.io/v1` `EncryptionConfiguration`
//! file (k8s.io/apiserver `pkg/server/options/encryptionconfig`;
//! <https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/#understanding-the-encryption-at-rest-configuration>),
//! read at start into the key prefixes and providers of a [`super::TransformingBackend`].
//! A file that does not validate stops the server with the field at fault.

use std::path::Path;

use anyhow::{Context, Result, bail};
use base64::Engine;
use serde::Deserialize;

use super::transformer::{PrefixTransformers, Transformer};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct EncryptionConfiguration {
    api_version: String,
    kind: String,
    #[serde(default)]
    resources: Vec<ResourceConfiguration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResourceConfiguration {
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    providers: Vec<ProviderConfiguration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProviderConfiguration {
    aesgcm: Option<KeysConfiguration>,
    aescbc: Option<KeysConfiguration>,
    secretbox: Option<KeysConfiguration>,
    identity: Option<serde_json::Value>,
    kms: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysConfiguration {
    #[serde(default)]
    keys: Vec<Key>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Key {
    name: String,
    secret: String,
}

/// The storage key prefix of a configured resource name (`secrets`, `deployments.apps`,
/// `widgets.example.com`, or the wildcards `*.apps`, `*.` for the core group and `*.*`):
/// several prefixes for a group wildcard. `builtin` lists the served built-in resources as
/// (group, resource, storage segment).
fn prefixes(name: &str, builtin: &[(String, String, String)]) -> Result<Vec<String>, String> {
    if name == "*.*" {
        return Ok(vec!["/registry/".into()]);
    }
    let (resource, group) = name.split_once('.').unwrap_or((name, ""));
    if resource.is_empty() || resource.contains('/') {
        return Err(format!("{name:?}: resource name must be resource.group, *.group or *.*"));
    }
    if resource == "*" {
        let out: Vec<String> = builtin
            .iter()
            .filter(|(g, _, _)| g == group)
            .map(|(_, _, storage)| format!("/registry/{storage}/"))
            .collect();
        return Ok(out);
    }
    if resource.contains('*') {
        return Err(format!("{name:?}: only a whole resource may be a wildcard"));
    }
    Ok(vec![match builtin.iter().find(|(g, r, _)| g == group && r == resource) {
        Some((_, _, storage)) => format!("/registry/{storage}/"),
        // Custom resources are stored as kube-apiserver stores them.
        None if !group.is_empty() => format!("/registry/{group}/{resource}/"),
        None => return Err(format!("{name:?}: not a resource of the core group")),
    }])
}

fn key_bytes(field: &str, key: &Key, lengths: &[usize]) -> Result<Vec<u8>, String> {
    if key.name.is_empty() || key.name.contains(':') {
        return Err(format!("{field}.name: key name must be non-empty and may not contain ':'"));
    }
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(key.secret.trim())
        .map_err(|e| format!("{field}.secret: secret is not base64: {e}"))?;
    if !lengths.contains(&bytes.len()) {
        return Err(format!(
            "{field}.secret: secret is not of the expected length, got {}, expected one of {lengths:?}",
            bytes.len()
        ));
    }
    Ok(bytes)
}

/// Parses and validates an `EncryptionConfiguration` document into key prefixes and their
/// providers, in file order. `builtin`: the served built-in resources as (group, resource,
/// storage segment).
///
/// # Errors
/// Anything kube-apiserver refuses: another kind, an entry without resources or providers, a
/// provider with no or several types, no keys, duplicate key names, a secret that is not base64
/// or of the wrong length, a resource listed twice, and `kms` (not supported by skiff).
pub fn parse(text: &str, builtin: &[(String, String, String)]) -> Result<Vec<(String, PrefixTransformers)>> {
    let cfg: EncryptionConfiguration = serde_saphyr::from_str(text).context("not an EncryptionConfiguration")?;
    if cfg.kind != "EncryptionConfiguration" || cfg.api_version != "apiserver.config.k8s.io/v1" {
        bail!("kind and apiVersion must be EncryptionConfiguration and apiserver.config.k8s.io/v1");
    }
    if cfg.resources.is_empty() {
        bail!("resources: at least one resource must be given");
    }
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, rc) in cfg.resources.iter().enumerate() {
        let at = format!("resources[{i}]");
        if rc.resources.is_empty() {
            bail!("{at}.resources: Required value: resources is a required field");
        }
        if rc.providers.is_empty() {
            bail!("{at}.providers: Required value: providers is a required field");
        }
        let mut providers = Vec::new();
        for (j, p) in rc.providers.iter().enumerate() {
            let field = format!("{at}.providers[{j}]");
            let kinds =
                [p.aesgcm.is_some(), p.aescbc.is_some(), p.secretbox.is_some(), p.identity.is_some(), p.kms.is_some()];
            if kinds.iter().filter(|k| **k).count() != 1 {
                bail!("{field}: Invalid value: exactly one provider must be configured");
            }
            if p.kms.is_some() {
                bail!(
                    "{field}.kms: Unsupported value: skiff has no KMS plugin support; use aescbc, aesgcm or secretbox"
                );
            }
            if p.identity.is_some() {
                providers.push(Transformer::Identity);
                continue;
            }
            let (keys, what, lengths): (&KeysConfiguration, &str, &[usize]) = match (&p.aesgcm, &p.aescbc, &p.secretbox)
            {
                (Some(k), _, _) => (k, "aesgcm", &[16, 24, 32]),
                (_, Some(k), _) => (k, "aescbc", &[16, 24, 32]),
                (_, _, Some(k)) => (k, "secretbox", &[32]),
                _ => unreachable!("one provider is set"),
            };
            if keys.keys.is_empty() {
                bail!("{field}.{what}.keys: Required value: keys is a required field");
            }
            let mut names = std::collections::HashSet::new();
            for (k, key) in keys.keys.iter().enumerate() {
                let kf = format!("{field}.{what}.keys[{k}]");
                let bytes = key_bytes(&kf, key, lengths).map_err(anyhow::Error::msg)?;
                if !names.insert(key.name.clone()) {
                    bail!("{kf}.name: Duplicate value: {:?}", key.name);
                }
                let name = key.name.clone();
                providers.push(match what {
                    "aesgcm" => Transformer::AesGcm { name, key: bytes },
                    "aescbc" => Transformer::AesCbc { name, key: bytes },
                    _ => Transformer::Secretbox { name, key: bytes },
                });
            }
        }
        for (k, name) in rc.resources.iter().enumerate() {
            if !seen.insert(name.clone()) {
                bail!("{at}.resources[{k}]: Duplicate value: {name:?}");
            }
            for prefix in
                prefixes(name, builtin).map_err(|e| anyhow::anyhow!("{at}.resources[{k}]: Invalid value: {e}"))?
            {
                out.push((prefix, PrefixTransformers(providers.clone())));
            }
        }
    }
    Ok(out)
}

/// Reads `path` ([`parse`]) with the built-in resources of [`crate::resources::builtin`].
///
/// # Errors
/// An unreadable file, or what [`parse`] refuses, naming the file.
pub fn load(path: &Path) -> Result<Vec<(String, PrefixTransformers)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let builtin: Vec<(String, String, String)> = crate::resources::builtin()
        .iter()
        .map(|d| (d.group.to_string(), d.resource.to_string(), d.storage.to_string()))
        .collect();
    parse(&text, &builtin).with_context(|| format!("--encryption-provider-config {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builtin() -> Vec<(String, String, String)> {
        [
            ("", "secrets", "secrets"),
            ("", "configmaps", "configmaps"),
            ("apps", "deployments", "deployments"),
            ("apps", "replicasets", "replicasets"),
        ]
        .iter()
        .map(|(g, r, s)| (g.to_string(), r.to_string(), s.to_string()))
        .collect()
    }

    const KEY32: &str = "c2VjcmV0IGlzIHNlY3VyZSwgb3IgaXMgaXQ/AAAAAAA="; // 32 bytes

    #[test]
    fn a_configuration_maps_resources_to_key_prefixes_with_providers_in_order() {
        let text = format!(
            r#"apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets, "*.apps", widgets.example.com]
    providers:
      - aesgcm: {{keys: [{{name: key2, secret: "{KEY32}"}}]}}
      - aescbc: {{keys: [{{name: key1, secret: "{KEY32}"}}]}}
      - identity: {{}}
"#
        );
        let rules = parse(&text, &builtin()).unwrap();
        let prefixes: Vec<&str> = rules.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(
            prefixes,
            [
                "/registry/secrets/",
                "/registry/deployments/",
                "/registry/replicasets/",
                "/registry/example.com/widgets/"
            ]
        );
        let t = &rules[0].1;
        assert!(t.to_storage("k", b"v").unwrap().starts_with(b"k8s:enc:aesgcm:v1:key2:"));
        assert_eq!(t.0.len(), 3);
    }

    #[test]
    fn invalid_configurations_name_the_field_at_fault() {
        let doc = |providers: &str, resources: &str| {
            format!(
                "apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n  - resources: {resources}\n    providers: {providers}\n"
            )
        };
        let cases = [
            (
                doc(r#"[{aescbc: {keys: [{name: k, secret: "c2hvcnQ="}]}}]"#, "[secrets]"),
                "secret is not of the expected length, got 5",
            ),
            (doc(r#"[{aescbc: {keys: [{name: k, secret: "!!"}]}}]"#, "[secrets]"), "secret is not base64"),
            (
                doc(&format!(r#"[{{secretbox: {{keys: [{{name: "a:b", secret: "{KEY32}"}}]}}}}]"#), "[secrets]"),
                "may not contain ':'",
            ),
            (doc("[{identity: {}, aescbc: {keys: []}}]", "[secrets]"), "exactly one provider"),
            (doc("[{aesgcm: {keys: []}}]", "[secrets]"), "keys: Required value"),
            (doc("[{kms: {name: x}}]", "[secrets]"), "kms: Unsupported value"),
            (doc("[]", "[secrets]"), "providers: Required value"),
            (doc("[{identity: {}}]", "[secrets, secrets]"), "Duplicate value"),
            (doc("[{identity: {}}]", "[pods/status]"), "resources[0].resources[0]: Invalid value"),
            (doc("[{identity: {}}]", "[nosuch]"), "not a resource of the core group"),
        ];
        for (text, want) in cases {
            let e = format!("{:#}", parse(&text, &builtin()).unwrap_err());
            assert!(e.contains(want), "{want:?} not in {e:?}\n{text}");
        }
        assert!(parse("kind: Other\napiVersion: v1\nresources: []\n", &builtin()).is_err());
    }
}
