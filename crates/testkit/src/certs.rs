//! The mutual TLS of test clusters. One certificate authority per test process signs every
//! certificate a test needs: [`Server`](crate::Server) gives each node it starts a
//! certificate of its own and a `[cluster.tls]` section (unless the configuration has one, or
//! says `insecure = true`), and [`admin_certs`] makes the operator's for `taskmesh cluster`.

use std::path::Path;
use std::sync::OnceLock;

/// The authority's certificate and key (PEM), made on first use.
fn authority() -> &'static (String, String) {
    static CA: OnceLock<(String, String)> = OnceLock::new();
    CA.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        taskmesh_tls::certs::generate(dir.path(), &[], &[], false)
            .expect("make the test authority");
        let read =
            |f: &str| std::fs::read_to_string(dir.path().join(f)).expect("read the authority");
        (read("ca.pem"), read("ca.key"))
    })
}

/// Write the test authority (`ca.pem`, `ca.key`) into `dir`, with a certificate for each of
/// `nodes` and, with `admin`, the operator's (`admin.pem`, `admin.key`).
pub fn write_certs(dir: &Path, nodes: &[u64], admin: bool) {
    let (cert, key) = authority();
    std::fs::create_dir_all(dir).expect("create the certificate folder");
    std::fs::write(dir.join("ca.pem"), cert).expect("write ca.pem");
    std::fs::write(dir.join("ca.key"), key).expect("write ca.key");
    taskmesh_tls::certs::generate(dir, nodes, &[], admin).expect("make certificates");
}

/// A temporary folder with `ca.pem`, `admin.pem` and `admin.key` of the test authority: the
/// `--certs` of a `taskmesh cluster` command.
pub fn admin_certs() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_certs(dir.path(), &[], true);
    dir
}

/// `config` with a `[cluster.tls]` section naming certificates in `dir` (made there on first
/// use), when it is a node's configuration without one and without `insecure = true`.
pub(crate) fn with_cluster_tls(config: &str, dir: &Path) -> String {
    let explicit = config.contains("[cluster.tls]")
        || config
            .lines()
            .any(|l| l.split_whitespace().collect::<String>() == "insecure=true");
    let node_id = config.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == "node_id").then(|| v.trim().parse::<u64>().ok())?
    });
    let Some(id) = node_id.filter(|_| !explicit) else {
        return config.to_string();
    };
    let certs = dir.join("certs");
    if !certs.join(format!("node-{id}.pem")).exists() {
        write_certs(&certs, &[id], false);
    }
    let path = |f: String| format!("{:?}", certs.join(f).display().to_string());
    format!(
        "{config}\n[cluster.tls]\nca_file = {}\ncert_file = {}\nkey_file = {}\n",
        path("ca.pem".into()),
        path(format!("node-{id}.pem")),
        path(format!("node-{id}.key")),
    )
}
