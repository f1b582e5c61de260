//! `skiff secrets-encrypt reencrypt`: rewrites every Secret so it is stored under the first
//! provider of the server's current `--encryption-provider-config` — the last step of a key
//! rotation (<https://kubernetes.io/docs/tasks/administer-cluster/encrypt-data/#rotating-a-decryption-key>;
//! k3s's `secrets-encrypt reencrypt`). Kubernetes' documented way, `kubectl get secrets -A -o
//! json | kubectl replace -f -`, relies on kube-apiserver writing back values it read with an
//! older key even when nothing else changed; skiff's update path skips writes that change
//! nothing, so each Secret gets a real change instead: the annotation
//! [`REENCRYPTED_ANNOTATION`] set to the time of the run.

use std::path::PathBuf;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};

/// The annotation whose change makes the server write each Secret again.
pub const REENCRYPTED_ANNOTATION: &str = "skiff.io/secrets-reencrypted-at";

/// `skiff secrets-encrypt …`.
#[derive(clap::Subcommand)]
pub enum SecretsEncryptCommand {
    /// Write every Secret again so it is encrypted with the current first provider (run after
    /// the server restarted with the new key first).
    Reencrypt(ReencryptArgs),
}

/// Flags of `skiff secrets-encrypt reencrypt`.
#[derive(clap::Args)]
pub struct ReencryptArgs {
    /// The server's data directory (its admin kubeconfig is used).
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// A kubeconfig to use instead of DATA_DIR/kubeconfig.yaml.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// Runs a `skiff secrets-encrypt` command.
///
/// # Errors
/// The kubeconfig cannot be read, the server cannot be reached, or a Secret cannot be written
/// (the ones written before stay written; running again is safe).
pub async fn run(cmd: SecretsEncryptCommand) -> Result<()> {
    let SecretsEncryptCommand::Reencrypt(args) = cmd;
    let path = args
        .kubeconfig
        .unwrap_or_else(|| args.data_dir.unwrap_or_else(crate::server::default_data_dir).join("kubeconfig.yaml"));
    let kc = kube::config::Kubeconfig::read_from(&path).with_context(|| format!("reading {}", path.display()))?;
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await?;
    let client = kube::Client::try_from(config)?;
    let api: Api<Secret> = Api::all(client.clone());
    let stamp = skiff_apiserver::util::rfc3339(
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs() as i64,
    );
    let patch = serde_json::json!({"metadata": {"annotations": {REENCRYPTED_ANNOTATION: stamp}}});
    let mut written = 0usize;
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list_metadata(&params).await.context("listing Secrets")?;
        for s in &page.items {
            let (Some(ns), Some(name)) = (s.metadata.namespace.as_deref(), s.metadata.name.as_deref()) else {
                continue;
            };
            Api::<Secret>::namespaced(client.clone(), ns)
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("rewriting Secret {ns}/{name}"))?;
            written += 1;
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    eprintln!("re-encrypted {written} Secrets with the current first provider");
    Ok(())
}
