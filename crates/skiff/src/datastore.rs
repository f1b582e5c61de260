//! `skiff datastore`: moving a cluster's datastore and taking it back to an earlier state, with
//! the server stopped.
//!
//! - `migrate` copies every key of the embedded SQLite store (objects, the sealed bootstrap
//!   data, everything under `/registry/`) into an empty etcd, then verifies the copy — per key
//!   prefix (`/registry/<resource>/`), the number of keys and a SHA-256 over their keys and
//!   values must match. Afterwards `skiff server --data-dir D --datastore-endpoint E` serves the
//!   same cluster: objects keep their UIDs and ownerReferences because the stored bytes are
//!   copied as they are (encrypted Secrets stay encrypted), and the server adopts its own CA and
//!   tokens from the copied bootstrap data. k3s has no such tool for its SQLite store (k3s
//!   discussion #9777); its documented path is a new etcd cluster and a restore.
//! - `snapshot save` writes a consistent copy of the store to a file: for the embedded store,
//!   SQLite's online backup of the database (the server may be running); for etcd, etcd's own
//!   snapshot (the Maintenance API's `Snapshot`, a bbolt file `etcdutl snapshot restore` also
//!   reads). `snapshot restore` puts the embedded store back to a snapshot's state (the server
//!   stopped; the replaced database is kept beside it).
//!
//! Store revisions are not carried over by `migrate`: etcd numbers the copied keys from its own
//! revision, so every client lists again after the server restarts (as after
//! `etcdutl snapshot restore` without `--bump-revision`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Subcommand;
use futures::StreamExt;
use skiff_store::{Backend, RangeRequest};

/// Every key skiff writes lives under this prefix (Kubernetes' `/registry` layout).
const REGISTRY_PREFIX: &str = "/registry/";

/// Keys read per range request while copying or verifying.
const PAGE: usize = 2048;

/// Writes (or etcd transactions) in flight against the target while copying: enough to keep
/// etcd's raft pipeline full on loopback without queueing thousands of requests.
const IN_FLIGHT: usize = 16;

/// Where a cluster's data lives: the embedded store of `--data-dir`, or etcd. The same flags as
/// `skiff server`'s (kube-apiserver's names for the etcd ones).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct DatastoreArgs {
    /// etcd endpoints (comma-separated `http(s)://host:port`); default: embedded SQLite at
    /// DATA_DIR/db/state.db.
    #[arg(long, env = "SKIFF_DATASTORE_ENDPOINT")]
    pub datastore_endpoint: Option<String>,
    /// CA bundle (PEM) that signed the etcd servers' certificates, for `https://` endpoints
    /// (kube-apiserver's flag).
    #[arg(long = "etcd-cafile", env = "SKIFF_ETCD_CAFILE")]
    pub etcd_cafile: Option<PathBuf>,
    /// Client certificate (PEM) presented to etcd (kube-apiserver's flag).
    #[arg(long = "etcd-certfile", env = "SKIFF_ETCD_CERTFILE", requires = "etcd_keyfile")]
    pub etcd_certfile: Option<PathBuf>,
    /// Private key (PEM) of `--etcd-certfile` (kube-apiserver's flag).
    #[arg(long = "etcd-keyfile", env = "SKIFF_ETCD_KEYFILE", requires = "etcd_certfile")]
    pub etcd_keyfile: Option<PathBuf>,
}

impl DatastoreArgs {
    /// The etcd configuration when an endpoint is given, `None` for the embedded store.
    ///
    /// # Errors
    /// A malformed endpoint list.
    pub fn etcd_config(&self) -> Result<Option<skiff_store::etcd::EtcdConfig>> {
        let Some(list) = self.datastore_endpoint.as_deref().filter(|l| !l.trim().is_empty()) else {
            return Ok(None);
        };
        let mut cfg = skiff_store::etcd::EtcdConfig::from_endpoint_list(list)?;
        if self.etcd_cafile.is_some() || self.etcd_certfile.is_some() {
            cfg.tls = Some(skiff_store::etcd::EtcdTls {
                ca_file: self.etcd_cafile.clone(),
                cert_file: self.etcd_certfile.clone(),
                key_file: self.etcd_keyfile.clone(),
            });
        }
        Ok(Some(cfg))
    }

    /// Opens the store these flags name. etcd may still be starting (started by the same
    /// script), so it is retried for `etcd_wait`.
    ///
    /// # Errors
    /// etcd unreachable after `etcd_wait`, or an embedded database that cannot be opened (see
    /// [`skiff_store::sqlite::SqliteBackend::open`]).
    pub async fn open(
        &self,
        data_dir: &Path,
        opts: skiff_store::Options,
        etcd_wait: Duration,
    ) -> Result<Arc<dyn Backend>> {
        if let Some(cfg) = self.etcd_config()? {
            let deadline = Instant::now() + etcd_wait;
            loop {
                match skiff_store::etcd::EtcdBackend::connect(cfg.clone(), opts.clone()).await {
                    Ok(backend) => return Ok(Arc::new(backend)),
                    Err(skiff_store::Error::Unavailable(e)) if Instant::now() < deadline => {
                        tracing::warn!(endpoints = %cfg.endpoints.join(","), error = %e, "etcd is not reachable yet; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => {
                        return Err(e).with_context(|| format!("connecting to etcd at {}", cfg.endpoints.join(",")));
                    }
                }
            }
        }
        let dir = data_dir.join("db");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = sqlite_path(data_dir);
        let backend = tokio::task::spawn_blocking(move || skiff_store::sqlite::SqliteBackend::open(&path, opts))
            .await?
            .context("opening the embedded datastore")?;
        Ok(Arc::new(backend))
    }
}

/// The embedded store's database file of a data directory.
pub fn sqlite_path(data_dir: &Path) -> PathBuf {
    data_dir.join("db").join("state.db")
}

/// `skiff datastore …`.
#[derive(Subcommand)]
pub enum DatastoreCommand {
    /// Copy the embedded store of --data-dir into an empty etcd (--datastore-endpoint) and verify
    /// the copy; then `skiff server --data-dir D --datastore-endpoint E` serves the same cluster.
    /// The server must be stopped.
    Migrate(MigrateArgs),
    /// Save the store to a file or restore the embedded store from one.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
}

/// Flags of `skiff datastore migrate`.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The server's data directory, whose embedded store is copied.
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The etcd to copy into.
    #[command(flatten)]
    pub target: DatastoreArgs,
    /// Copy even when etcd already holds keys under /registry/ (an existing key is overwritten
    /// only if it is also in the source; others are left as they are and fail verification).
    #[arg(long)]
    pub allow_non_empty: bool,
    /// No progress bar (for scripts and logs).
    #[arg(long)]
    pub quiet: bool,
}

/// `skiff datastore snapshot …`.
#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Write a consistent copy of the store to FILE (the server may be running).
    Save(SaveArgs),
    /// Replace the embedded store of --data-dir with the snapshot FILE (the server must be
    /// stopped; the replaced database is kept as state.db.before-restore-<unix time>).
    Restore(RestoreArgs),
}

/// Flags of `skiff datastore snapshot save`.
#[derive(clap::Args)]
pub struct SaveArgs {
    /// Where to write the snapshot; must not exist.
    pub file: PathBuf,
    /// The server's data directory (for the embedded store).
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// The store to save.
    #[command(flatten)]
    pub store: DatastoreArgs,
}

/// Flags of `skiff datastore snapshot restore`.
#[derive(clap::Args)]
pub struct RestoreArgs {
    /// A snapshot written by `skiff datastore snapshot save` from an embedded store.
    pub file: PathBuf,
    /// The server's data directory whose embedded store is replaced.
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
}

/// Runs a `skiff datastore` command.
///
/// # Errors
/// See each command: a running server, an unreachable or non-empty target, a failed
/// verification, an unreadable snapshot.
pub async fn run(cmd: DatastoreCommand) -> Result<()> {
    match cmd {
        DatastoreCommand::Migrate(args) => migrate(args).await,
        DatastoreCommand::Snapshot(SnapshotCommand::Save(args)) => save(args).await,
        DatastoreCommand::Snapshot(SnapshotCommand::Restore(args)) => restore(args).await,
    }
}

fn data_dir(flag: Option<PathBuf>) -> PathBuf {
    flag.unwrap_or_else(crate::server::default_data_dir)
}

/// Opens a data directory's embedded store for a command that needs the server stopped: claims
/// the directory's PID file so a server cannot start meanwhile (and refuses if one runs).
fn claim_stopped(dir: &Path) -> Result<PathBuf> {
    if !sqlite_path(dir).exists() {
        bail!("{} holds no embedded datastore (no {})", dir.display(), sqlite_path(dir).display());
    }
    crate::pidfile::claim(dir)
}

async fn migrate(args: MigrateArgs) -> Result<()> {
    let dir = data_dir(args.data_dir);
    if args.target.etcd_config()?.is_none() {
        bail!("skiff datastore migrate: --datastore-endpoint (the etcd to copy into) is required");
    }
    let pid = claim_stopped(&dir)?;
    let result = async {
        let opts = skiff_store::Options { compaction_interval: None, ..Default::default() };
        let path = sqlite_path(&dir);
        let source: Arc<dyn Backend> = Arc::new(
            tokio::task::spawn_blocking(move || skiff_store::sqlite::SqliteBackend::open_existing(&path, opts))
                .await?
                .context("opening the embedded datastore")?,
        );
        let cfg = args.target.etcd_config()?.context("--datastore-endpoint is required")?;
        let endpoints = cfg.endpoints.join(",");
        let target = skiff_store::etcd::EtcdBackend::connect(
            cfg,
            skiff_store::Options { compaction_interval: None, ..Default::default() },
        )
        .await
        .with_context(|| format!("connecting to etcd at {endpoints}"))?;
        let target = CopyTarget::Etcd(Arc::new(target));
        let started = Instant::now();
        let report = copy(source.as_ref(), &target, args.allow_non_empty, !args.quiet).await?;
        let copied_in = started.elapsed();
        verify(source.as_ref(), target.backend().as_ref(), report.revision).await?;
        eprintln!(
            "copied {} keys ({} bytes) from {} at revision {} in {:.1} s ({:.0} keys/s) and verified them in {} key prefixes",
            report.keys,
            report.bytes,
            sqlite_path(&dir).display(),
            report.revision,
            copied_in.as_secs_f64(),
            report.keys as f64 / copied_in.as_secs_f64().max(1e-9),
            report.prefixes,
        );
        eprintln!(
            "start the server on etcd with: skiff server --data-dir {} --datastore-endpoint {}",
            dir.display(),
            args.target.datastore_endpoint.as_deref().unwrap_or_default()
        );
        Ok(())
    }
    .await;
    crate::pidfile::release(&pid);
    result
}

/// What [`copy`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyReport {
    /// The source revision the copy is a snapshot of.
    pub revision: skiff_store::Revision,
    /// Keys written.
    pub keys: u64,
    /// Value bytes written.
    pub bytes: u64,
    /// Distinct `/registry/<resource>/` prefixes.
    pub prefixes: usize,
}

/// Where [`copy`] writes.
pub enum CopyTarget {
    /// etcd, written in multi-key transactions ([`skiff_store::etcd::EtcdBackend::create_all`]).
    Etcd(Arc<skiff_store::etcd::EtcdBackend>),
    /// Any store, one create per key (the unit tests' SQLite targets).
    #[cfg(test)]
    Store(Arc<dyn Backend>),
}

impl CopyTarget {
    /// The target as a [`Backend`].
    pub fn backend(&self) -> Arc<dyn Backend> {
        match self {
            CopyTarget::Etcd(etcd) => etcd.clone(),
            #[cfg(test)]
            CopyTarget::Store(store) => store.clone(),
        }
    }
}

/// Bytes of values per etcd transaction: under etcd's default request limit of 1.5 MiB
/// (`--max-request-bytes`) with room for the keys.
const TXN_BYTES: usize = 1 << 20;

/// Splits a page into etcd transactions of at most [`skiff_store::etcd::MAX_TXN_OPS`] keys and
/// [`TXN_BYTES`] of values (a larger single value goes alone).
fn batches(kvs: Vec<skiff_store::KeyValue>) -> Vec<Vec<(String, Vec<u8>)>> {
    let mut out: Vec<Vec<(String, Vec<u8>)>> = Vec::new();
    let mut bytes = 0;
    for kv in kvs {
        let fits =
            out.last().is_some_and(|b| b.len() < skiff_store::etcd::MAX_TXN_OPS && bytes + kv.value.len() <= TXN_BYTES);
        if !fits {
            out.push(Vec::new());
            bytes = 0;
        }
        bytes += kv.value.len();
        out.last_mut().expect("pushed above").push((kv.key, kv.value));
    }
    out
}

/// Copies every key under `/registry/` of `source`, as one snapshot at its current revision,
/// into `target`, [`IN_FLIGHT`] writes (or etcd transactions) at a time. Values are copied
/// byte for byte.
///
/// # Errors
/// `target` holds keys under `/registry/` and `allow_non_empty` is false (nothing is written);
/// any read or write failure.
pub async fn copy(
    source: &dyn Backend,
    target: &CopyTarget,
    allow_non_empty: bool,
    progress: bool,
) -> Result<CopyReport> {
    let store = target.backend();
    let existing = store.count(RangeRequest { prefix: REGISTRY_PREFIX.into(), ..Default::default() }).await?;
    if existing > 0 && !allow_non_empty {
        bail!(
            "the target datastore already holds {existing} keys under {REGISTRY_PREFIX}; migrate copies into an empty etcd \
             (pass --allow-non-empty to copy over them)"
        );
    }
    let revision = source.current_revision().await?;
    let total = source.count(RangeRequest { prefix: REGISTRY_PREFIX.into(), revision, ..Default::default() }).await?;
    let bar = if progress {
        let bar = indicatif::ProgressBar::new(u64::try_from(total).unwrap_or_default());
        bar.set_style(
            indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} keys ({per_sec})")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar
    } else {
        indicatif::ProgressBar::hidden()
    };
    let mut report = CopyReport { revision, keys: 0, bytes: 0, prefixes: 0 };
    let mut prefixes = std::collections::BTreeSet::new();
    let mut start_after = None;
    loop {
        let page = source
            .range(RangeRequest {
                prefix: REGISTRY_PREFIX.into(),
                start_after: start_after.clone(),
                limit: PAGE,
                revision,
            })
            .await?;
        start_after = page.kvs.last().map(|kv| kv.key.clone());
        for kv in &page.kvs {
            prefixes.insert(prefix_of(&kv.key).to_string());
            report.bytes += kv.value.len() as u64;
        }
        report.keys += page.kvs.len() as u64;
        let writes = futures::stream::iter(batches(page.kvs).into_iter().map(|batch| {
            let store = store.clone();
            let etcd = match target {
                CopyTarget::Etcd(etcd) => Some(etcd.clone()),
                #[cfg(test)]
                CopyTarget::Store(_) => None,
            };
            async move {
                let n = batch.len() as u64;
                let written = match etcd {
                    Some(etcd) => etcd.create_all(&batch).await,
                    None => Err(skiff_store::Error::AlreadyExists { key: String::new() }),
                };
                match written {
                    Ok(_) => {}
                    // Key by key: the default path, and a batch meeting keys that exist.
                    Err(skiff_store::Error::AlreadyExists { .. }) => {
                        for (key, value) in batch {
                            put(store.as_ref(), &key, value).await.with_context(|| format!("writing {key}"))?;
                        }
                    }
                    Err(e) => return Err(anyhow::Error::from(e).context("writing a batch of keys to etcd")),
                }
                anyhow::Ok(n)
            }
        }))
        .buffer_unordered(IN_FLIGHT);
        futures::pin_mut!(writes);
        while let Some(written) = writes.next().await {
            bar.inc(written?);
        }
        if !page.more {
            break;
        }
    }
    bar.finish_and_clear();
    report.prefixes = prefixes.len();
    Ok(report)
}

/// Creates `key`, or replaces it when it exists (only with `--allow-non-empty`).
async fn put(target: &dyn Backend, key: &str, value: Vec<u8>) -> Result<()> {
    match target.create(key, value.clone()).await {
        Ok(_) => Ok(()),
        Err(skiff_store::Error::AlreadyExists { .. }) => {
            let current = target.get(key).await?.map(|kv| kv.mod_revision).unwrap_or_default();
            target.update(key, value, current).await?;
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// `/registry/pods/default/x` → `/registry/pods/`; keys of other shapes are their own prefix.
fn prefix_of(key: &str) -> &str {
    let rest = key.strip_prefix(REGISTRY_PREFIX).unwrap_or(key);
    match rest.find('/') {
        Some(i) => &key[..REGISTRY_PREFIX.len() + i + 1],
        None => key,
    }
}

/// Per key prefix: how many keys and a SHA-256 over each key and value (lengths included, so
/// no two different listings hash alike).
#[derive(Debug, Default, PartialEq, Eq)]
struct Digest {
    keys: u64,
    sha256: Vec<u8>,
}

async fn digests(store: &dyn Backend, revision: skiff_store::Revision) -> Result<BTreeMap<String, Digest>> {
    let mut contexts: BTreeMap<String, (u64, ring::digest::Context)> = BTreeMap::new();
    let mut start_after = None;
    loop {
        let page = store
            .range(RangeRequest {
                prefix: REGISTRY_PREFIX.into(),
                start_after: start_after.clone(),
                limit: PAGE,
                revision,
            })
            .await?;
        for kv in &page.kvs {
            let (n, ctx) = contexts
                .entry(prefix_of(&kv.key).to_string())
                .or_insert_with(|| (0, ring::digest::Context::new(&ring::digest::SHA256)));
            *n += 1;
            ctx.update(&(kv.key.len() as u64).to_be_bytes());
            ctx.update(kv.key.as_bytes());
            ctx.update(&(kv.value.len() as u64).to_be_bytes());
            ctx.update(&kv.value);
        }
        start_after = page.kvs.last().map(|kv| kv.key.clone());
        if !page.more {
            break;
        }
    }
    Ok(contexts
        .into_iter()
        .map(|(p, (keys, ctx))| (p, Digest { keys, sha256: ctx.finish().as_ref().to_vec() }))
        .collect())
}

/// Checks that `target` now holds exactly what `source` held at `revision` under `/registry/`.
///
/// # Errors
/// Names every prefix whose key count or checksum differs.
async fn verify(source: &dyn Backend, target: &dyn Backend, revision: skiff_store::Revision) -> Result<()> {
    let want = digests(source, revision).await?;
    let got = digests(target, 0).await?;
    let mut problems = Vec::new();
    for prefix in want.keys().chain(got.keys()).collect::<std::collections::BTreeSet<_>>() {
        match (want.get(prefix), got.get(prefix)) {
            (Some(w), Some(g)) if w == g => {}
            (Some(w), Some(g)) if w.keys != g.keys => {
                problems.push(format!("{prefix}: {} keys in the source, {} in the target", w.keys, g.keys));
            }
            (Some(_), Some(_)) => problems.push(format!("{prefix}: the keys' values differ")),
            (Some(w), None) => problems.push(format!("{prefix}: {} keys in the source, none in the target", w.keys)),
            (None, Some(g)) => problems.push(format!("{prefix}: {} keys in the target only", g.keys)),
            (None, None) => {}
        }
    }
    if !problems.is_empty() {
        bail!("verification failed: {}", problems.join("; "));
    }
    Ok(())
}

async fn save(args: SaveArgs) -> Result<()> {
    if args.file.exists() {
        bail!("{} exists; snapshot save does not overwrite", args.file.display());
    }
    if let Some(cfg) = args.store.etcd_config()? {
        return save_etcd(cfg, &args.file).await;
    }
    let db = sqlite_path(&data_dir(args.data_dir));
    if !db.exists() {
        bail!("no embedded datastore at {}", db.display());
    }
    let file = args.file.clone();
    let bytes = tokio::task::spawn_blocking(move || save_sqlite(&db, &file)).await??;
    eprintln!("saved the embedded datastore to {} ({bytes} bytes)", args.file.display());
    Ok(())
}

/// A consistent copy of the SQLite database `db` into the new file `file` with `VACUUM INTO`
/// (<https://www.sqlite.org/lang_vacuum.html#vacuuminto>): one read transaction, so the copy is
/// one revision even while the server writes (in WAL mode a reader blocks no writer). Returns
/// the copy's size in bytes.
fn save_sqlite(db: &Path, file: &Path) -> Result<u64> {
    let src = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .with_context(|| format!("opening {}", db.display()))?;
    let target = file.to_str().with_context(|| format!("{} is not UTF-8", file.display()))?;
    src.execute("VACUUM INTO ?1", [target])
        .with_context(|| format!("copying {} into {}", db.display(), file.display()))?;
    std::fs::File::open(file)?.sync_all()?;
    Ok(std::fs::metadata(file)?.len())
}

async fn save_etcd(cfg: skiff_store::etcd::EtcdConfig, file: &Path) -> Result<()> {
    let mut options = etcd_client::ConnectOptions::new().with_connect_timeout(cfg.dial_timeout);
    if let Some(tls) = &cfg.tls {
        options = options.with_tls(skiff_store::etcd::tls_options(tls)?);
    }
    let client = etcd_client::Client::connect(&cfg.endpoints, Some(options))
        .await
        .with_context(|| format!("connecting to etcd at {}", cfg.endpoints.join(",")))?;
    let mut stream = client.maintenance_client().snapshot().await.context("starting etcd's snapshot")?;
    // Written beside the target first, so a failed snapshot leaves no file that looks whole.
    let partial = file.with_extension("part");
    let mut out = std::fs::File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    let mut bytes = 0usize;
    while let Some(chunk) = stream.message().await.context("reading etcd's snapshot")? {
        std::io::Write::write_all(&mut out, chunk.blob()).with_context(|| format!("writing {}", partial.display()))?;
        bytes += chunk.blob().len();
    }
    out.sync_all()?;
    std::fs::rename(&partial, file)?;
    eprintln!(
        "saved etcd's snapshot to {} ({bytes} bytes); restore it into a new etcd data dir with `etcdutl snapshot restore`",
        file.display()
    );
    Ok(())
}

async fn restore(args: RestoreArgs) -> Result<()> {
    let dir = data_dir(args.data_dir);
    // The snapshot must be a skiff store: opened read-only first, so a wrong file changes nothing.
    let (revision, keys) = check_snapshot(&args.file)
        .await
        .with_context(|| format!("{} is not a snapshot of skiff's embedded datastore", args.file.display()))?;
    let pid = claim_stopped(&dir)?;
    let result = (|| -> Result<()> {
        let db = sqlite_path(&dir);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
        let kept = db.with_file_name(format!("state.db.before-restore-{now}"));
        // A stopped server leaves its WAL checkpointed only when it shut down cleanly: the kept
        // copy is made through SQLite so it includes what the WAL still holds.
        save_sqlite(&db, &kept).with_context(|| format!("keeping the current database as {}", kept.display()))?;
        let staged = db.with_file_name("state.db.restoring");
        std::fs::copy(&args.file, &staged).with_context(|| format!("copying {}", args.file.display()))?;
        std::fs::File::open(&staged)?.sync_all()?;
        for suffix in ["-wal", "-shm"] {
            let side = PathBuf::from(format!("{}{suffix}", db.display()));
            if side.exists() {
                std::fs::remove_file(&side).with_context(|| format!("removing {}", side.display()))?;
            }
        }
        std::fs::rename(&staged, &db).with_context(|| format!("replacing {}", db.display()))?;
        if let Some(parent) = db.parent() {
            std::fs::File::open(parent)?.sync_all()?;
        }
        eprintln!(
            "restored {} to the snapshot's revision {revision} ({keys} keys); the previous database is kept as {}",
            db.display(),
            kept.display()
        );
        Ok(())
    })();
    crate::pidfile::release(&pid);
    result
}

/// Opens a snapshot as a store (a temporary copy, so the file itself is never written) and
/// returns its revision and key count.
async fn check_snapshot(file: &Path) -> Result<(skiff_store::Revision, i64)> {
    let tmp = tempfile::tempdir()?;
    let copy = tmp.path().join("state.db");
    std::fs::copy(file, &copy)?;
    let store = tokio::task::spawn_blocking(move || {
        skiff_store::sqlite::SqliteBackend::open_existing(
            &copy,
            skiff_store::Options { compaction_interval: None, ..Default::default() },
        )
    })
    .await??;
    let revision = store.current_revision().await?;
    let keys = store.count(RangeRequest { prefix: REGISTRY_PREFIX.into(), ..Default::default() }).await?;
    Ok((revision, keys))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(dir: &Path) -> Arc<dyn Backend> {
        Arc::new(
            skiff_store::sqlite::SqliteBackend::open(
                &dir.join("state.db"),
                skiff_store::Options { compaction_interval: None, ..Default::default() },
            )
            .expect("open"),
        )
    }

    #[test]
    fn a_key_prefix_is_the_resource_segment_of_the_registry_layout() {
        assert_eq!(prefix_of("/registry/pods/default/web-1"), "/registry/pods/");
        assert_eq!(prefix_of("/registry/namespaces/default"), "/registry/namespaces/");
        assert_eq!(prefix_of("/registry/skiff.io/bootstrap"), "/registry/skiff.io/");
        assert_eq!(prefix_of("/registry/odd"), "/registry/odd");
    }

    #[tokio::test]
    async fn a_copy_holds_every_key_and_value_of_the_source_snapshot_and_verifies() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (source, target) = (sqlite(a.path()), sqlite(b.path()));
        // More keys than one page, written concurrently so the store commits them in groups.
        futures::future::try_join_all((0..1_234).map(|i| {
            let source = source.clone();
            async move {
                source.create(&format!("/registry/pods/ns{}/p{i}", i % 7), format!("{{\"i\":{i}}}").into_bytes()).await
            }
        }))
        .await
        .unwrap();
        source.create("/registry/skiff.io/bootstrap", b"sealed".to_vec()).await.unwrap();
        source.delete("/registry/pods/ns0/p0", None).await.unwrap();
        let report = copy(source.as_ref(), &CopyTarget::Store(target.clone()), false, false).await.unwrap();
        assert_eq!((report.keys, report.prefixes), (1_234, 2));
        verify(source.as_ref(), target.as_ref(), report.revision).await.unwrap();
        let kv = target.get("/registry/pods/ns3/p10").await.unwrap().unwrap();
        assert_eq!(kv.value, b"{\"i\":10}");
        assert!(target.get("/registry/pods/ns0/p0").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_non_empty_target_is_refused_unless_allowed_and_nothing_is_written() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (source, target) = (sqlite(a.path()), sqlite(b.path()));
        source.create("/registry/pods/default/a", b"new".to_vec()).await.unwrap();
        target.create("/registry/pods/default/a", b"old".to_vec()).await.unwrap();
        let before = target.current_revision().await.unwrap();
        let err = copy(source.as_ref(), &CopyTarget::Store(target.clone()), false, false).await.unwrap_err();
        assert!(err.to_string().contains("already holds 1 keys"), "{err}");
        assert_eq!(target.current_revision().await.unwrap(), before);
        copy(source.as_ref(), &CopyTarget::Store(target.clone()), true, false).await.unwrap();
        assert_eq!(target.get("/registry/pods/default/a").await.unwrap().unwrap().value, b"new");
    }

    #[tokio::test]
    async fn verification_names_the_prefix_whose_keys_or_values_differ() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (source, target) = (sqlite(a.path()), sqlite(b.path()));
        source.create("/registry/pods/default/a", b"1".to_vec()).await.unwrap();
        source.create("/registry/secrets/default/s", b"x".to_vec()).await.unwrap();
        let report = copy(source.as_ref(), &CopyTarget::Store(target.clone()), false, false).await.unwrap();
        let kv = target.get("/registry/secrets/default/s").await.unwrap().unwrap();
        target.update("/registry/secrets/default/s", b"y".to_vec(), kv.mod_revision).await.unwrap();
        target.create("/registry/configmaps/default/extra", b"{}".to_vec()).await.unwrap();
        let err = verify(source.as_ref(), target.as_ref(), report.revision).await.unwrap_err().to_string();
        assert!(err.contains("/registry/secrets/: the keys' values differ"), "{err}");
        assert!(err.contains("/registry/configmaps/: 1 keys in the target only"), "{err}");
        assert!(!err.contains("/registry/pods/"), "{err}");
    }
}
