//! Where the service binaries are.

use std::path::{Path, PathBuf};

use anyhow::bail;

use super::ServiceKind;

/// Directory holding the three binaries; overrides the default (the running executable's
/// target directory).
pub const BIN_DIR_ENV: &str = "QIM_BIN_DIR";

/// Paths of `qim-writer`, `qim-archiver` and `qim-mailbox-dispatcher`.
#[derive(Clone, Debug)]
pub struct ServiceBinaries {
    /// `qim-writer`.
    pub writer: PathBuf,
    /// `qim-archiver`.
    pub archiver: PathBuf,
    /// `qim-mailbox-dispatcher`.
    pub dispatcher: PathBuf,
}

impl ServiceBinaries {
    /// Finds the binaries in `$QIM_BIN_DIR`, else in the target directory of the running
    /// executable (`target/<profile>/`, also when it runs from `target/<profile>/deps/`), which
    /// `cargo test --workspace` and `cargo build` fill.
    ///
    /// # Errors
    ///
    /// A binary is missing: the message names it and the cargo command that builds it.
    pub fn locate() -> anyhow::Result<Self> {
        let dir = match std::env::var(BIN_DIR_ENV).ok().filter(|d| !d.trim().is_empty()) {
            Some(d) => PathBuf::from(d.trim()),
            None => default_dir()?,
        };
        Self::in_dir(&dir)
    }

    /// The binaries in `dir`, each checked to exist.
    ///
    /// # Errors
    ///
    /// A binary is missing: the message names it and the cargo command that builds it.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Self> {
        let release = dir.ends_with("release");
        let find = |kind: ServiceKind| -> anyhow::Result<PathBuf> {
            let path = dir.join(kind.binary());
            if !path.is_file() {
                let flag = if release { " --release" } else { "" };
                bail!(
                    "{} is missing at {}: build it with `cargo build{flag} -p {} --bin {}` (or set {BIN_DIR_ENV})",
                    kind.binary(),
                    path.display(),
                    kind.package(),
                    kind.binary()
                );
            }
            Ok(path)
        };
        Ok(Self {
            writer: find(ServiceKind::Writer)?,
            archiver: find(ServiceKind::Archiver)?,
            dispatcher: find(ServiceKind::Dispatcher)?,
        })
    }

    /// The path of `kind`'s binary.
    pub fn path(&self, kind: ServiceKind) -> &Path {
        match kind {
            ServiceKind::Writer => &self.writer,
            ServiceKind::Archiver => &self.archiver,
            ServiceKind::Dispatcher => &self.dispatcher,
        }
    }
}

fn default_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let mut dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_binary_names_the_build_command() {
        let dir = std::env::temp_dir().join(crate::stack::unique_name("nobins"));
        let err = ServiceBinaries::in_dir(&dir).unwrap_err().to_string();
        assert!(err.contains("qim-writer is missing"), "{err}");
        assert!(err.contains("cargo build -p qim-writer --bin qim-writer"), "{err}");
    }
}
