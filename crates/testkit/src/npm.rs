//! npm packages for the tests that run them (the TypeScript SDK, the reference MCP server):
//! installed once under the test target's temporary directory and reused.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::run_bounded;

const NPM_TIMEOUT: Duration = Duration::from_secs(600);

/// A directory (`tmp/dir`) with `package` (`name@version`) installed in its `node_modules`, as
/// an ES module project ([`npm_packages`] with one package).
pub fn npm_package(tmp: &Path, dir: &str, package: &str) -> PathBuf {
    npm_packages(tmp, dir, &[package])
}

/// A directory (`tmp/dir`) with `packages` (each `name@version`) installed in its
/// `node_modules`, as an ES module project. A marker file written after a verified install
/// (each installed package.json names its version) lets later runs skip npm.
///
/// `tmp` is the test's `CARGO_TARGET_TMPDIR`. It needs `node` (18 or later) and `npm`, and the
/// npm registry the first time; when either is missing it panics with the output.
pub fn npm_packages(tmp: &Path, dir: &str, packages: &[&str]) -> PathBuf {
    // Tests of one binary run at once: one installs, the others wait and reuse it.
    static INSTALL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    let wanted = packages.join(" ");
    let dir = tmp.join(dir);
    let marker = dir.join("taskmesh-test-installed");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create the package directory");
    std::fs::write(
        dir.join("package.json"),
        r#"{"private":true,"type":"module"}"#,
    )
    .expect("write package.json");
    let npm = run_bounded(
        Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent"])
            .args(packages)
            .current_dir(&dir),
        NPM_TIMEOUT,
    );
    assert!(
        npm.ok(),
        "`npm install {wanted}` failed:\n{}",
        npm.describe()
    );
    for package in packages {
        let (name, version) = package
            .rsplit_once('@')
            .filter(|(n, _)| !n.is_empty())
            .expect("package is name@version");
        let installed =
            std::fs::read_to_string(dir.join("node_modules").join(name).join("package.json"))
                .expect("the installed package.json");
        let installed: Value = serde_json::from_str(&installed).expect("package.json is JSON");
        assert_eq!(
            installed["version"], version,
            "npm installed another {name}"
        );
    }
    std::fs::write(&marker, &wanted).expect("write the marker");
    dir
}
