//! Compiles the sandbox's pause program (`pause/pause.c`) into a static executable in
//! `OUT_DIR`, which `sandbox_image.rs` embeds: every node then carries its own sandbox image
//! and runs pods without any image having been imported first.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=pause/pause.c");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR")).join("pause");
    let compiler = cc::Build::new().opt_level_str("s").get_compiler();
    let mut cmd: Command = compiler.to_command();
    cmd.args(["-static", "-s", "-o"]).arg(&out).arg("pause/pause.c");
    let status =
        cmd.status().unwrap_or_else(|e| panic!("running the C compiler ({:?}) for pause.c: {e}", compiler.path()));
    assert!(
        status.success(),
        "compiling pause/pause.c as a static executable failed: a C compiler and the static C library \
         (Debian: gcc, libc6-dev) are needed; scripts/install-deps installs them"
    );
}
