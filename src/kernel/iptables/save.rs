//! Reading `iptables-save` output: which of our jumps are missing, whether
//! our chains drifted from what we wrote, what `--cleanup` must remove,
//! and the normalised view the contract tests compare.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    canon::{self, canonical_rule},
    rules::{self, FamilyJump, TableRules, JUMPS},
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
fn target(spec: &str) -> Option<&str> {
    let mut words = spec.split_whitespace();
    while let Some(w) = words.next() {
        if w == "-j" || w == "-g" {
            return words.next();
        }
    }
    None
}

/// Our jumps of `table` that `saved` (one table's dump, or a whole dump)
/// lacks, in [`JUMPS`] order.
pub fn missing_jumps(
    family: IpFamily,
    table: &str,
    saved: &str,
) -> Vec<FamilyJump> {
    let tables = parse(family, saved);
    let empty = SavedTable::default();
    let t = tables.get(table).unwrap_or(&empty);
    JUMPS
        .iter()
        .filter(|j| j.table == table)
        .filter(|j| {
            let spec = j.spec();
            !t.chain_rules(j.from).any(|s| s == spec)
        })
        .map(|&jump| FamilyJump { family, jump })
        .collect()
}

/// Whether our chains in `saved` differ from `expected`: a chain missing,
/// or its rules not exactly the expected ones in the expected order.
/// Missing jumps are reported by [`missing_jumps`], not here.
pub fn drifted(expected: &TableRules, saved: &str) -> bool {
    let tables = parse(expected.family, saved);
    let Some(t) = tables.get(expected.table) else {
        return true;
    };
    expected.chains.iter().any(|chain| {
        if !t.has_chain(chain) {
            return true;
        }
        let want =
            expected
                .rules
                .iter()
                .filter(|r| r.chain == *chain)
                .map(|r| {
                    canon::tokenize(&r.spec)
                        .and_then(|tok| canonical_rule(expected.family, &tok))
                        .unwrap_or_else(|_| r.spec.clone())
                });
        !want.eq(t.chain_rules(chain).map(str::to_owned))
    })
}

/// What `--cleanup` does to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleanup {
    /// The restore payload, `None` when nothing of ours is there.
    pub payload: Option<String>,
    /// Our chains that are flushed but kept, because a rule that is not
    /// ours still jumps to them; deleting them would fail the whole
    /// restore (EBUSY / EMLINK).
    pub kept: Vec<String>,
}

/// Upstream's `cleanupIptablesLeftovers` for one table, as one restore:
/// delete our jumps, flush all our chains, then delete them. Nothing else
/// is touched.
pub fn cleanup(family: IpFamily, table: &str, saved: &str) -> Cleanup {
    let tables = parse(family, saved);
    let ours: BTreeSet<&str> = rules::chains(table).iter().copied().collect();
    let Some(t) = tables.get(table) else {
        return Cleanup {
            payload: None,
            kept: Vec::new(),
        };
    };
    let jumps: Vec<(&str, String)> = JUMPS
        .iter()
        .filter(|j| j.table == table)
        .map(|j| (j.from, j.spec()))
        .collect();
    let is_our_jump = |chain: &str, spec: &str| {
        jumps.iter().any(|(from, s)| *from == chain && s == spec)
    };
    let present: Vec<&str> = rules::chains(table)
        .iter()
        .copied()
        .filter(|c| t.has_chain(c))
        .collect();
    let mut kept = Vec::new();
    for chain in &present {
        let foreign_ref = t.rules.iter().any(|(c, s)| {
            !ours.contains(c.as_str())
                && !is_our_jump(c, s)
                && target(s) == Some(chain)
        });
        if foreign_ref {
            kept.push((*chain).to_owned());
        }
    }
    let mut lines = Vec::new();
    for (chain, spec) in &t.rules {
        if is_our_jump(chain, spec) {
            lines.push(format!("-D {chain} {spec}"));
        }
    }
    for chain in &present {
        lines.push(format!("-F {chain}"));
    }
    for chain in &present {
        if !kept.iter().any(|k| k == chain) {
            lines.push(format!("-X {chain}"));
        }
    }
    let payload = (!lines.is_empty())
        .then(|| format!("*{table}\n{}\nCOMMIT\n", lines.join("\n")));
    Cleanup { payload, kept }
}

/// The part of a dump that is ours, in a stable text form: our chains
/// (sorted) with their rules in order, and the rules of other chains that
/// jump to ours. Two dumps with equal normalised forms hold the same
/// kube-proxy state, whichever tool (or the model) printed them.
pub fn normalise(family: IpFamily, saved: &str) -> String {
    let mut out = String::new();
    for (name, t) in parse(family, saved) {
        let ours: BTreeSet<&str> =
            rules::chains(&name).iter().copied().collect();
        let mut lines = Vec::new();
        for (chain, spec) in &t.rules {
            if !ours.contains(chain.as_str())
                && target(spec).is_some_and(|x| ours.contains(x))
            {
                lines.push(format!("-A {chain} {spec}"));
            }
        }
        let mut present: Vec<&str> = t
            .chains
            .iter()
            .map(|(c, _)| c.as_str())
            .filter(|c| ours.contains(c))
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
mod tests;
