//! Compiles the `.proto` files of the workspace's `proto/` directory into Rust.
//!
//! protox parses the files in pure Rust (no `protoc` binary is needed), and tonic-prost-build
//! generates the prost messages and the tonic clients and servers from the resulting
//! descriptor set.

use std::path::{Path, PathBuf};
use std::{env, fs, io};

/// All `.proto` files under `dir`, as paths relative to `root`, in sorted order.
fn proto_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            proto_files(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            let rel = path
                .strip_prefix(root)
                .map_err(|e| io::Error::other(e.to_string()))?;
            out.push(rel.to_path_buf());
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR")?);
    let root = manifest_dir.join("..").join("..").join("proto");

    let mut files = Vec::new();
    proto_files(&root, &root, &mut files)?;
    files.sort();
    if files.is_empty() {
        return Err(format!("no .proto files under {}", root.display()).into());
    }

    // The directory too, so that adding a file triggers a rebuild.
    println!("cargo:rerun-if-changed={}", root.display());
    for f in &files {
        println!("cargo:rerun-if-changed={}", root.join(f).display());
    }

    let fds = protox::compile(&files, [&root])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}
