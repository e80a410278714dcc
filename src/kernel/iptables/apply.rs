//! One sync's iptables work: nothing when the rules' input did not change,
//! otherwise one save and at most one restore per table.

use super::{
    rules::{self, RulesInput},
    save, Family, Iptables,
};
use crate::kernel::KernelError;

/// What a call to [`RulesApplier::sync`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyReport {
    pub saves: usize,
    pub restores: usize,
    /// Per failed table, the error; the other tables were still applied.
    pub errors: Vec<(Family, &'static str, KernelError)>,
}

impl ApplyReport {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }
}

/// Remembers the last input applied in full, so that syncs that change no
/// rule run no tool at all.
#[derive(Debug, Clone, Default)]
pub struct RulesApplier {
    applied: Option<RulesInput>,
}

impl RulesApplier {
    pub fn new() -> Self {
        Self::default()
    }

    /// The input last applied without error, if any.
    pub fn applied(&self) -> Option<&RulesInput> {
        self.applied.as_ref()
    }

    /// Brings the kernel to `input`'s rules.
    ///
    /// With `verify` false and `input` equal to the last applied one, this
    /// runs nothing. Otherwise it saves each table, and restores it only
    /// when our chains differ from the rules (someone flushed them, or the
    /// input changed) or a jump is missing: so a periodic `verify` pass
    /// over an intact kernel costs one save per table and no restore.
    pub async fn sync<K: Iptables>(
        &mut self,
        k: &mut K,
        input: &RulesInput,
        verify: bool,
    ) -> ApplyReport {
        let mut report = ApplyReport::default();
        if !verify && self.applied.as_ref() == Some(input) {
            return report;
        }
        for table in rules::table_rules(input) {
            let (family, name) = (table.family, table.table);
            report.saves += 1;
            let saved = match k.save(family, name).await {
                Ok(s) => s,
                Err(e) => {
                    report.errors.push((family, name, e));
                    continue;
                }
            };
            let missing = save::missing_jumps(family, name, &saved);
            if missing.is_empty() && !save::drifted(&table, &saved) {
                continue;
            }
            let payload = rules::payloads(input, &missing)
                .into_iter()
                .find(|p| p.family == family && p.table == name);
            let Some(payload) = payload else {
                continue;
            };
            report.restores += 1;
            if let Err(e) = k.restore(family, &payload.text).await {
                tracing::error!(
                    error = %e,
                    family = %family,
                    table = name,
                    "iptables-restore failed"
                );
                report.errors.push((family, name, e));
            }
        }
        self.applied = report.is_ok().then(|| input.clone());
        report
    }
}

/// Removes every chain and jump of ours in the given families and nothing
/// else (`--cleanup`): one save and at most one restore per table. Our
/// chains that a foreign rule still jumps to are flushed and kept, and
/// listed in the result.
pub async fn cleanup<K: Iptables>(
    k: &mut K,
    families: &[Family],
) -> (ApplyReport, Vec<(Family, &'static str, String)>) {
    let mut report = ApplyReport::default();
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
            let plan = save::cleanup(family, table, &saved);
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
