//! Reading files that other people put in place: handler components, their
//! sidecars and `sluice.toml`. Only regular files are read, and only up to a
//! limit: a sidecar linked to `/dev/zero` must not grow the host, a FIFO
//! must not stop it, and a directory named `x.wasm` is refused, not skipped.
//!
//! A file is opened without blocking (a FIFO with no writer would otherwise
//! wait forever), then checked on the open descriptor, so that what is
//! checked is what is read even if the name is replaced meanwhile. Symbolic
//! links are followed, to regular files only.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::units::format_size;

/// The largest sidecar (`NAME.toml`) or `sluice.toml` read.
pub(crate) const MAX_CONFIG_SIZE: u64 = 256 << 10;

/// The largest handler component read, unless `max_component_size` in
/// `sluice.toml` says otherwise. A Python component with its interpreter is
/// about 18 MiB.
pub const DEFAULT_MAX_COMPONENT_SIZE: u64 = 128 << 20;

/// Why a file was not read. The text names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// It could not be opened (missing, a dangling link, no permission).
    #[error("{}: cannot open", .path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// It is not a regular file.
    #[error("{}: is {kind}, not a regular file; replace it with the file itself", .path.display())]
    NotRegular { path: PathBuf, kind: &'static str },
    /// It is larger than what is read of it.
    #[error("{}: is {}, over the limit of {} ({what})", .path.display(), format_size(*.size), format_size(*.limit))]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
        /// The setting that raises the limit, or why there is none.
        what: &'static str,
    },
    /// Reading it failed.
    #[error("{}: cannot read", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bytes of the regular file at `path`, at most `limit` of them.
/// `raise` says how the limit is raised, for the error.
pub(crate) fn read_regular(
    path: &Path,
    limit: u64,
    raise: &'static str,
) -> Result<Vec<u8>, FileError> {
    let open = |source| FileError::Open {
        path: path.to_path_buf(),
        source,
    };
    let read = |source| FileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(open)?;
    let meta = file.metadata().map_err(read)?;
    if !meta.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(&meta.file_type()),
        });
    }
    let too_large = |size| FileError::TooLarge {
        path: path.to_path_buf(),
        size,
        limit,
        what: raise,
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // The file may grow while it is read: never past the limit.
    file.take(limit + 1).read_to_end(&mut bytes).map_err(read)?;
    if bytes.len() as u64 > limit {
        return Err(too_large(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_regular`] for text: the file must be UTF-8.
pub(crate) fn read_text(path: &Path, limit: u64, raise: &'static str) -> Result<String, FileError> {
    let bytes = read_regular(path, limit, raise)?;
    String::from_utf8(bytes).map_err(|e| FileError::Read {
        path: path.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()),
    })
}

/// What a file that is not a regular file is, in words.
pub(crate) fn kind_of(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::chain;

    #[test]
    fn only_regular_files_within_the_limit_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.toml");
        std::fs::write(&file, "queue = \"q\"\n").unwrap();
        assert_eq!(read_text(&file, 100, "-").unwrap(), "queue = \"q\"\n");

        let err = read_regular(&file, 4, "raise it with x").unwrap_err();
        assert!(
            err.to_string()
                .contains("over the limit of 4B (raise it with x)"),
            "{err}"
        );

        let zero = dir.path().join("zero.toml");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let err = read_regular(&zero, 100, "-").unwrap_err().to_string();
        assert!(err.contains("is a character device"), "{err}");

        let fifo = dir.path().join("fifo.toml");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid, NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_regular(&fifo, 100, "-").unwrap_err().to_string();
        assert!(err.contains("is a FIFO"), "{err}");

        let err = read_regular(dir.path(), 100, "-").unwrap_err().to_string();
        assert!(err.contains("is a directory"), "{err}");

        let missing = dir.path().join("gone.wasm");
        let err = read_regular(&missing, 100, "-").unwrap_err();
        assert!(
            chain(&err).contains("gone.wasm: cannot open: No such file"),
            "{}",
            chain(&err)
        );
    }
}
