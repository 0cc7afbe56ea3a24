//! A lab PKI of two CAs for tests of TLS mistakes: `ca` (the daemon's)
//! with relay certificate `r1`, and `other`, a CA the daemon does not trust,
//! with its own `r1`.

use std::path::PathBuf;

use tracesync_common::tls::pki;

use super::DaemonTls;

/// The two CAs in a temporary directory.
pub struct TwoCaPki {
    dir: tempfile::TempDir,
}

impl TwoCaPki {
    pub fn new() -> TwoCaPki {
        let dir = tempfile::tempdir().expect("tempdir");
        let names = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        for ca in ["ca", "other"] {
            pki::init(&dir.path().join(ca), &names).expect("pki init");
            pki::issue(&dir.path().join(ca), "r1", None).expect("pki issue");
        }
        TwoCaPki { dir }
    }

    /// The directory holding both CAs.
    pub fn root(&self) -> &std::path::Path {
        self.dir.path()
    }

    pub fn path(&self, ca: &str, file: &str) -> PathBuf {
        self.dir.path().join(ca).join(file)
    }

    pub fn daemon(&self) -> DaemonTls {
        DaemonTls {
            cert: self.path("ca", "daemon.crt"),
            key: self.path("ca", "daemon.key"),
            client_ca: self.path("ca", "ca.crt"),
        }
    }

    /// `--tls-*` flags: trusting `trust`'s CA, presenting `cert`'s r1.
    pub fn relay_flags(&self, trust: &str, cert: &str) -> Vec<String> {
        let p = |ca: &str, f: &str| self.path(ca, f).display().to_string();
        vec![
            "--tls-ca".into(),
            p(trust, "ca.crt"),
            "--tls-cert".into(),
            p(cert, "r1.crt"),
            "--tls-key".into(),
            p(cert, "r1.key"),
        ]
    }
}

impl Default for TwoCaPki {
    fn default() -> Self {
        Self::new()
    }
}
