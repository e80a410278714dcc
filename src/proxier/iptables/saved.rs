//! What a table's `iptables-save` dump means for our rules: which of our
//! jumps are missing, whether our chains drifted from what we wrote, what
//! `--cleanup` must remove, and our part of it in normalised form.

use std::collections::BTreeSet;

use super::rules::{self, FamilyJump, TableRules, JUMPS};
use crate::kernel::iptables::{
    canon::{self, canonical_rule},
    save::{parse, target, SavedTable},
    IpFamily,
};

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

/// Our part of a dump ([`crate::kernel::iptables::save::normalise`] over
/// our chains): two dumps with equal normalised forms hold the same
/// kube-proxy state. The contract tests compare them.
#[cfg(any(test, feature = "test-support"))]
pub fn normalise(family: IpFamily, saved: &str) -> String {
    crate::kernel::iptables::save::normalise(family, saved, |table, chain| {
        rules::chains(table).contains(&chain)
    })
}

#[cfg(test)]
mod tests;
