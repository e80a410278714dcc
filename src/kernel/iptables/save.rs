//! Reading `iptables-save` output: its tables, chains and rules in
//! canonical form, and a normalised view of some of its chains that the
//! contract tests compare. What the dump means for our rules (missing
//! jumps, drift, cleanup) is the proxier's (`proxier/iptables/saved.rs`).

use std::collections::BTreeMap;

use super::{
    canon::{self, canonical_rule},
    IpFamily,
};

/// One table of an `iptables-save` dump.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SavedTable {
    /// Chain name to policy (`-` for user chains), in dump order.
    pub chains: Vec<(String, String)>,
    /// `(chain, spec)` in dump order; specs in canonical form.
    pub rules: Vec<(String, String)>,
}

impl SavedTable {
    pub fn has_chain(&self, name: &str) -> bool {
        self.chains.iter().any(|(c, _)| c == name)
    }

    pub fn chain_rules<'a>(
        &'a self,
        chain: &'a str,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.rules
            .iter()
            .filter(move |(c, _)| c == chain)
            .map(|(_, s)| s.as_str())
    }
}

/// Parses a dump into its tables. Counters and `#` comments are dropped;
/// rules are re-canonicalised so that either tool's output and the model's
/// compare equal. A line this parser does not understand is kept verbatim,
/// so it still counts as a difference.
pub fn parse(family: IpFamily, text: &str) -> BTreeMap<String, SavedTable> {
    let mut tables = BTreeMap::new();
    let mut current: Option<(String, SavedTable)> = None;
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('*') {
            if let Some((n, t)) = current.take() {
                tables.insert(n, t);
            }
            current = Some((name.to_owned(), SavedTable::default()));
            continue;
        }
        let Some((_, table)) = current.as_mut() else {
            continue;
        };
        if line == "COMMIT" {
            if let Some((n, t)) = current.take() {
                tables.insert(n, t);
            }
            continue;
        }
        if let Some(decl) = line.strip_prefix(':') {
            let mut words = decl.split_whitespace();
            if let (Some(name), Some(policy)) = (words.next(), words.next()) {
                table.chains.push((name.to_owned(), policy.to_owned()));
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("-A ") {
            let (chain, spec) = rest.split_once(' ').unwrap_or((rest, ""));
            let spec = canon::tokenize(spec)
                .and_then(|t| canonical_rule(family, &t))
                .unwrap_or_else(|_| spec.to_owned());
            table.rules.push((chain.to_owned(), spec));
        }
    }
    if let Some((n, t)) = current {
        tables.insert(n, t);
    }
    tables
}

/// The target of a canonical rule (`-j X` / `-g X`), if any.
pub fn target(spec: &str) -> Option<&str> {
    let mut words = spec.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-j" || w == "-g" {
            return words.next();
        }
    }
    None
}

/// The part of a dump in the chains `ours(table, chain)` picks, in a
/// stable text form: those chains (sorted) with their rules in order, and
/// the rules of other chains that jump to them. Two dumps with equal
/// normalised forms hold the same state of those chains, whichever tool
/// (or the model) printed them.
#[cfg(any(test, feature = "test-support"))]
pub fn normalise(
    family: IpFamily,
    saved: &str,
    ours: impl Fn(&str, &str) -> bool,
) -> String {
    let mut out = String::new();
    for (name, t) in parse(family, saved) {
        let ours = |chain: &str| ours(&name, chain);
        let mut lines = Vec::new();
        for (chain, spec) in &t.rules {
            if !ours(chain) && target(spec).is_some_and(ours) {
                lines.push(format!("-A {chain} {spec}"));
            }
        }
        let mut present: Vec<&str> = t
            .chains
            .iter()
            .map(|(c, _)| c.as_str())
            .filter(|c| ours(c))
            .collect();
        present.sort_unstable();
        for chain in &present {
            lines.push(format!(":{chain}"));
        }
        for chain in &present {
            for spec in t.chain_rules(chain) {
                lines.push(format!("-A {chain} {spec}"));
            }
        }
        if !lines.is_empty() {
            out.push_str(&format!("*{name}\n{}\n", lines.join("\n")));
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
