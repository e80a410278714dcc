//! One sync's iptables work: nothing when the rules' input did not change,
//! otherwise at most one save per table and one restore per family.

use super::{
    rules::{self, Payload, RulesInput},
    saved,
};
use crate::kernel::{
    iptables::{IpFamily, Iptables},
    KernelError,
};

/// What a call to [`RulesApplier::sync`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RulesReport {
    pub saves: usize,
    pub restores: usize,
    /// Per failed table, the error; the other tables were still applied.
    pub errors: Vec<(IpFamily, &'static str, KernelError)>,
}

impl RulesReport {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Remembers the last input applied in full, so that syncs that change no
/// rule run no tool at all.
#[derive(Debug, Clone, Default)]
pub struct RulesApplier {
    applied: Option<RulesInput>,
    /// Restores run so far: a repair's saves predating the last one say
    /// nothing about the kernel now.
    restores: u64,
}

/// One table as a repair read it.
pub type TableSave = (IpFamily, &'static str, Result<String, KernelError>);

impl RulesApplier {
    pub fn new() -> Self {
        Self::default()
    }

    /// The input last applied without error, if any.
    #[cfg(test)]
    pub fn applied(&self) -> Option<&RulesInput> {
        self.applied.as_ref()
    }

    /// How many restores ran so far.
    pub fn restores(&self) -> u64 {
        self.restores
    }

    /// The verifying half of [`RulesApplier::sync`], on tables saved
    /// earlier (off the sync loop, while syncs went on): restores each
    /// table whose chains drifted from `input`'s rules or that lacks a
    /// jump. Nothing is done when a restore ran since the saves began
    /// (`restores_before`): the saves may predate it.
    pub async fn repair<K: Iptables>(
        &mut self,
        k: &mut K,
        input: &RulesInput,
        saved: &[TableSave],
        restores_before: u64,
    ) -> RulesReport {
        let mut report = RulesReport::default();
        if self.restores != restores_before {
            return report;
        }
        let mut payloads = Vec::new();
        for table in rules::table_rules(input) {
            let (family, name) = (table.family, table.table);
            let Some((_, _, text)) =
                saved.iter().find(|(f, t, _)| *f == family && *t == name)
            else {
                continue;
            };
            report.saves += 1;
            match text {
                Ok(text) => payloads.extend(drifted(input, &table, text)),
                Err(e) => report.errors.push((family, name, e.clone())),
            }
        }
        self.restore(k, payloads, &mut report).await;
        if !report.is_ok() {
            self.applied = None;
        }
        report
    }

    /// Restores the payloads, each family's tables in one process (nat
    /// first, as [`rules::table_rules`] orders them): a cold sync runs
    /// one tool per family, not per table. A failed run fails each of
    /// its tables.
    async fn restore<K: Iptables>(
        &mut self,
        k: &mut K,
        payloads: Vec<Payload>,
        report: &mut RulesReport,
    ) {
        let mut families: Vec<IpFamily> =
            payloads.iter().map(|p| p.family).collect();
        families.dedup();
        for family in families {
            let tables: Vec<&Payload> =
                payloads.iter().filter(|p| p.family == family).collect();
            let text: String = tables.iter().map(|p| p.text.as_str()).collect();
            report.restores += 1;
            self.restores += 1;
            if let Err(e) = k.restore(family, &text).await {
                for table in tables {
                    log_failure(&e, family, table.table);
                    report.errors.push((family, table.table, e.clone()));
                }
            }
        }
    }

    /// Brings the kernel to `input`'s rules.
    ///
    /// Without `verify`, this trusts the last successful apply: an
    /// unchanged input runs nothing, and a changed one restores only the
    /// tables whose rules changed, one process per family, without
    /// reading them first. With `verify` it saves each table and restores
    /// it only when our chains differ
    /// from the rules (someone flushed them) or a jump is missing: a
    /// verify pass over an intact kernel costs one save per table and no
    /// restore.
    #[cfg(any(test, feature = "test-support"))]
    pub async fn sync<K: Iptables>(
        &mut self,
        k: &mut K,
        input: &RulesInput,
        verify: bool,
    ) -> RulesReport {
        self.sync_saved(k, input, verify, Vec::new()).await
    }

    /// The tables [`RulesApplier::sync`] of `input` reads before it
    /// restores them: every table when nothing applied is trusted (or
    /// when verifying), else those the last apply did not have.
    pub fn reads(
        &self,
        input: &RulesInput,
        verify: bool,
    ) -> Vec<(IpFamily, &'static str)> {
        let Some(previous) = self.trusted(input, verify) else {
            return Vec::new();
        };
        rules::table_rules(input)
            .into_iter()
            .filter(|t| {
                !previous
                    .iter()
                    .any(|p| p.family == t.family && p.table == t.table)
            })
            .map(|t| (t.family, t.table))
            .collect()
    }

    /// [`RulesApplier::sync`] with tables already read (those
    /// [`RulesApplier::reads`] named, saved while other work went on): a
    /// table found there is not read again; one whose read failed is.
    pub async fn sync_saved<K: Iptables>(
        &mut self,
        k: &mut K,
        input: &RulesInput,
        verify: bool,
        mut saved: Vec<TableSave>,
    ) -> RulesReport {
        let mut report = RulesReport::default();
        let Some(previous) = self.trusted(input, verify) else {
            return report;
        };
        let mut payloads = Vec::new();
        for table in rules::table_rules(input) {
            let (family, name) = (table.family, table.table);
            let before = previous
                .iter()
                .find(|t| t.family == family && t.table == name);
            if let Some(before) = before {
                if *before == table {
                    continue;
                }
                // Applied before with its jumps in place: rewriting our
                // chains is enough.
                payloads.push(Payload {
                    family,
                    table: name,
                    text: rules::render_table(&table, &[]),
                });
                continue;
            }
            report.saves += 1;
            let early = saved
                .iter()
                .position(|(f, t, _)| *f == family && *t == name)
                .map(|at| saved.swap_remove(at).2);
            let read = match early {
                Some(Ok(text)) => Ok(text),
                _ => k.save(family, name).await,
            };
            match read {
                Ok(saved) => payloads.extend(drifted(input, &table, &saved)),
                Err(e) => report.errors.push((family, name, e)),
            }
        }
        self.restore(k, payloads, &mut report).await;
        self.applied = report.is_ok().then(|| input.clone());
        report
    }

    /// What a sync of `input` may take as applied: `None` when the input
    /// is the one applied (nothing to do), else the tables of the last
    /// apply, none when verifying or when nothing was applied.
    fn trusted(
        &self,
        input: &RulesInput,
        verify: bool,
    ) -> Option<Vec<rules::TableRules>> {
        match (&self.applied, verify) {
            (Some(prev), false) if prev == input => None,
            (Some(prev), false) => Some(rules::table_rules(prev)),
            _ => Some(Vec::new()),
        }
    }
}

/// `table` restored with the jumps `saved` lacks, if it lacks any or its
/// chains drifted.
fn drifted(
    input: &RulesInput,
    table: &rules::TableRules,
    saved: &str,
) -> Option<Payload> {
    let (family, name) = (table.family, table.table);
    let missing = saved::missing_jumps(family, name, saved);
    if missing.is_empty() && !saved::drifted(table, saved) {
        return None;
    }
    rules::payloads(input, &missing)
        .into_iter()
        .find(|p| p.family == family && p.table == name)
}

fn log_failure(e: &KernelError, family: IpFamily, table: &str) {
    tracing::error!(
        error = %e,
        family = %family,
        table,
        "iptables-restore failed"
    );
}

/// Removes every chain and jump of ours in the given families and nothing
/// else (`--cleanup`): one save and at most one restore per table. Our
/// chains that a foreign rule still jumps to are flushed and kept, and
/// listed in the result.
pub async fn cleanup<K: Iptables>(
    k: &mut K,
    families: &[IpFamily],
) -> (RulesReport, Vec<(IpFamily, &'static str, String)>) {
    let mut report = RulesReport::default();
    let mut kept = Vec::new();
    for &family in families {
        for table in [rules::NAT, rules::FILTER] {
            report.saves += 1;
            let saved = match k.save(family, table).await {
                Ok(s) => s,
                Err(e) => {
                    report.errors.push((family, table, e));
                    continue;
                }
            };
            let plan = saved::cleanup(family, table, &saved);
            kept.extend(plan.kept.into_iter().map(|c| (family, table, c)));
            if let Some(payload) = plan.payload {
                report.restores += 1;
                if let Err(e) = k.restore(family, &payload).await {
                    report.errors.push((family, table, e));
                }
            }
        }
    }
    (report, kept)
}

#[cfg(test)]
mod tests;
