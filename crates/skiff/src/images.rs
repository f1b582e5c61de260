//! `skiff images import`: loads image tarballs into a node's containerd, for nodes without a
//! registry (air-gapped). The work is done by [`skiff_kubelet::images::import_images`].

use std::path::PathBuf;

use anyhow::Result;
use skiff_kubelet::images::{ImportMode, import_images};

/// `skiff images …` subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ImagesCommand {
    /// Import docker-archive or OCI-layout tarballs into the node's containerd (namespace
    /// k8s.io). When the node is not running, the files are copied into DATA_DIR/images and
    /// imported when its agent starts.
    Import(ImportArgs),
}

/// Flags of `skiff images import`.
#[derive(clap::Args, Debug)]
pub struct ImportArgs {
    /// Data directory of the node (as for `skiff server` / `skiff agent`).
    #[arg(long, short = 'd', env = "SKIFF_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Image tarballs (docker-archive or OCI layout).
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
}

/// Runs an `images` subcommand.
pub async fn run(cmd: ImagesCommand) -> Result<()> {
    match cmd {
        ImagesCommand::Import(args) => {
            let data_dir = args.data_dir.unwrap_or_else(crate::server::default_data_dir);
            // The progress bar draws on stderr only when it is a terminal.
            match import_images(&data_dir, &args.files, true).await? {
                ImportMode::Imported => {
                    eprintln!("imported {} file(s) into the node at {}", args.files.len(), data_dir.display());
                }
                ImportMode::Queued(dir) => eprintln!(
                    "the node's containerd is not running; copied {} file(s) to {} (imported when the agent starts)",
                    args.files.len(),
                    dir.display()
                ),
            }
            Ok(())
        }
    }
}
