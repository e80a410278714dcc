//! The docs/ pages the tests generate from the code (configuration,
//! metrics): each test holds its page to what the code defines, and
//! `UPDATE_DOCS=1` rewrites the page instead.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// A file of the repository, by its path from the root.
pub fn repo_file(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// Fails unless the page at `relative` is `want`; with `UPDATE_DOCS` set,
/// writes it first. `test` is the test filter that rewrites it.
pub fn assert_page_is(relative: &str, want: &str, test: &str) {
    let path = repo_file(relative);
    if std::env::var_os("UPDATE_DOCS").is_some() {
        fs::write(&path, want).unwrap();
    }
    let have = fs::read_to_string(&path).unwrap_or_default();
    pretty_assertions::assert_eq!(
        have,
        want,
        "{relative} differs from the code: run `UPDATE_DOCS=1 cargo test \
         --lib {test}` and commit the page"
    );
}
