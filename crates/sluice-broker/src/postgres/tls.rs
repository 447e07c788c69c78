//! TLS to PostgreSQL, as the broker URL asks for it.
//!
//! `sslmode=require` (or libpq's `verify-ca` and `verify-full`, which mean
//! the same here) encrypts every connection and verifies the server's
//! certificate and host name: against the CA certificates in
//! `sslrootcert=PATH` when the URL names a file, else against the public
//! web roots (webpki-roots). Without `sslmode`, or with `sslmode=disable`,
//! connections are plain. libpq's `prefer` and `allow`, which fall back to
//! plain text without a word, are refused: say which one you mean.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// What the URL asked for: whether to use TLS, and which CAs to trust.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct TlsSettings {
    /// `sslmode=require` (or `verify-ca`, `verify-full`).
    pub(super) required: bool,
    /// `sslrootcert=PATH`: the CA certificates (PEM) to trust instead of
    /// the public web roots.
    pub(super) root_cert: Option<String>,
}

impl TlsSettings {
    /// Take `sslmode` or `sslrootcert` from a URL's `key=value` parameter;
    /// false when it is neither (the client's, then).
    pub(super) fn take(&mut self, key: &str, value: &str) -> anyhow::Result<bool> {
        match key {
            "sslmode" => {
                self.required = match value {
                    "disable" => false,
                    "require" | "verify-ca" | "verify-full" => true,
                    "prefer" | "allow" => anyhow::bail!(
                        "sslmode={value} would fall back to plain text without a word: write sslmode=require for TLS with the server's certificate verified, or sslmode=disable"
                    ),
                    _ => anyhow::bail!(
                        "sslmode={value:?} is not one sluice knows: write sslmode=require (TLS, verified) or sslmode=disable"
                    ),
                };
                Ok(true)
            }
            "sslrootcert" => {
                self.root_cert = Some(value.to_string());
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Check the settings fit together, and set the client's TLS mode.
    pub(super) fn apply(&self, config: &mut tokio_postgres::Config) -> anyhow::Result<()> {
        if self.root_cert.is_some() && !self.required {
            anyhow::bail!(
                "sslrootcert is set but TLS is not: add sslmode=require, or drop sslrootcert"
            );
        }
        config.ssl_mode(if self.required {
            SslMode::Require
        } else {
            SslMode::Disable
        });
        Ok(())
    }

    /// The connector every connection of the broker uses (never asked to
    /// speak TLS when it is not required).
    pub(super) fn connector(&self) -> anyhow::Result<MakeRustlsConnect> {
        let mut roots = rustls::RootCertStore::empty();
        match &self.root_cert {
            Some(path) => {
                for cert in read_certs(Path::new(path))? {
                    roots.add(cert).map_err(|e| {
                        anyhow::anyhow!("sslrootcert {path}: a certificate is not usable ({e})")
                    })?;
                }
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("TLS set-up: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
        Ok(MakeRustlsConnect::new(config))
    }
}

/// The PEM certificates in `path`: at least one, or an error that names it.
fn read_certs(path: &Path) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("sslrootcert {shown}: cannot read it ({e})"))?;
    let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("sslrootcert {shown}: not PEM certificates ({e})"))?;
    if certs.is_empty() {
        anyhow::bail!(
            "sslrootcert {shown}: holds no certificate (expected -----BEGIN CERTIFICATE-----)"
        );
    }
    Ok(certs)
}
