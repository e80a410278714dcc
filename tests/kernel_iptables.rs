//! The iptables contracts against the real tools: iptables' own
//! behaviour (`kernel::iptables::contract`) and our rules on it
//! (`proxier::iptables::contract`). iptables and ipsets are
//! per network namespace, so each run re-executes this test binary under
//! `unshare -n` (as root) and touches nothing outside that namespace. It
//! needs no IPVS, so unlike the other kernel tests it is not behind the
//! `kernel-tests` feature: the host's `cargo test` (`make unit`) runs it
//! with iptables-nft and iptables-legacy, in seconds, and is the only
//! place the legacy variant runs; the guest (`make vm-test`), where a
//! variant takes about a minute, runs nft only, with the `ipvs` match
//! that the host lacks.
//!
//! Every scenario runs on the real tools and on the model; besides the
//! scenario's own assertions, both must end in the same normalised state.

#[tokio::test]
async fn contract_against_real_iptables() -> anyhow::Result<()> {
    netns::contract_against_real_iptables().await
}

mod netns {
    use std::{
        env,
        future::Future,
        process::{Command, Stdio},
    };

    use anyhow::{bail, Context, Result};
    use kube_ipvs_proxy::{
        kernel::iptables::{
            contract,
            model::IptablesModel,
            real::{RealIptables, Variant},
            IpFamily, Iptables,
        },
        proxier::iptables::{contract as rules_contract, RulesInput},
    };
    use pretty_assertions::assert_eq;

    const IN_NETNS: &str = "KUBE_IPVS_PROXY_IPTABLES_NETNS";
    const VARIANT: &str = "KUBE_IPVS_PROXY_IPTABLES_VARIANT";

    fn variant_name(v: Variant) -> &'static str {
        match v {
            Variant::Installed => "installed",
            Variant::Nft => "nft",
            Variant::Legacy => "legacy",
        }
    }

    fn have(program: &str) -> bool {
        Command::new(program)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Runs `test` of this binary again in a new network namespace, once per
    /// iptables variant, and fails if any run fails or a variant is
    /// missing: one skipped for want of its tools would pass unchecked.
    fn in_fresh_netns(test: &str) -> Result<()> {
        let exe = env::current_exe().context("test binary path")?;
        // The guest is slow (about a minute per variant): there, nft only,
        // which checks the ipvs match the host lacks; the host runs both
        // in seconds.
        let variants = if testkit::guest::check().is_ok() {
            vec![Variant::Nft]
        } else {
            vec![Variant::Nft, Variant::Legacy]
        };
        for &v in &variants {
            let tool = format!("iptables-{}", variant_name(v));
            if !have(&tool) {
                bail!("{tool} is missing (Debian's iptables package has it)");
            }
        }
        for v in variants {
            let status = Command::new("unshare")
                .arg("-n")
                .arg(&exe)
                .args([test, "--exact", "--include-ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(IN_NETNS, "1")
                .env(VARIANT, variant_name(v))
                .status()
                .context("running unshare -n (needs root)")?;
            if !status.success() {
                bail!("{test} failed with iptables-{}", variant_name(v));
            }
        }
        Ok(())
    }

    fn variant_from_env() -> Variant {
        match env::var(VARIANT).as_deref() {
            Ok("nft") => Variant::Nft,
            Ok("legacy") => Variant::Legacy,
            _ => Variant::Installed,
        }
    }

    fn run_input(program: &str, args: &[&str], input: &str) -> Result<()> {
        let out = testkit::command::run_with_input(
            Command::new(program).args(args),
            input,
        );
        out.map(|_| ())
            .with_context(|| format!("{program} {args:?}"))
    }

    /// Every kube-proxy set of both families, so rules matching them load.
    fn create_sets() -> Result<()> {
        let mut batch = String::new();
        for family in [IpFamily::V4, IpFamily::V6] {
            for (name, kind) in rules_contract::set_names(family) {
                let opts = if kind == "bitmap:port" {
                    " range 0-65535".to_owned()
                } else if family == IpFamily::V6 {
                    " family inet6".to_owned()
                } else {
                    String::new()
                };
                batch.push_str(&format!("create {name} {kind}{opts} -exist\n"));
            }
        }
        run_input("ipset", &["restore"], &batch)
    }

    /// Empties both tables of both families between scenarios.
    fn reset(variant: Variant) -> Result<()> {
        for base in ["iptables", "ip6tables"] {
            let program = match variant {
                Variant::Installed => base.to_owned(),
                v => format!("{base}-{}", variant_name(v)),
            };
            for table in ["nat", "filter"] {
                for op in ["-F", "-X"] {
                    let status = Command::new(&program)
                        .args(["-w", "5", "-t", table, op])
                        .status()
                        .with_context(|| {
                            format!("{program} -t {table} {op}")
                        })?;
                    if !status.success() {
                        bail!("{program} -t {table} {op} failed");
                    }
                }
            }
        }
        Ok(())
    }

    /// Whether the kernel has the `ipvs` match (the guest does, a host
    /// without IPVS does not); the KUBE-IPVS-OUT-FILTER rules need it.
    async fn has_ipvs_match(real: &mut RealIptables) -> bool {
        let probe =
            "*filter\n:KUBE-PROBE - [0:0]\n-A KUBE-PROBE -m ipvs --vaddr \
                     198.18.0.1 -j DROP\nCOMMIT\n";
        let ok = real.restore(IpFamily::V4, probe).await.is_ok();
        let _ = real
            .restore(
                IpFamily::V4,
                "*filter\n-F KUBE-PROBE\n-X KUBE-PROBE\nCOMMIT\n",
            )
            .await;
        ok
    }

    fn model() -> IptablesModel {
        let names: Vec<String> = [IpFamily::V4, IpFamily::V6]
            .into_iter()
            .flat_map(rules_contract::set_names)
            .map(|(name, _)| name)
            .collect();
        IptablesModel::new().with_sets(names)
    }

    /// Runs `scenario` on a fresh model and on the emptied real tables, and
    /// checks they end in the same state.
    async fn both<F, Fut>(
        variant: Variant,
        name: &str,
        scenario: F,
    ) -> Result<()>
    where
        F: Fn(Box<dyn FnOnce() -> Target>) -> Fut,
        Fut: Future<Output = String>,
    {
        reset(variant)?;
        let want = scenario(Box::new(|| Target::Model(model()))).await;
        let got = scenario(Box::new(move || {
            Target::Real(RealIptables::new(variant))
        }))
        .await;
        assert_eq!(got, want, "{name}: kernel and model differ");
        Ok(())
    }

    /// Either implementation, so one closure can drive both.
    enum Target {
        Model(IptablesModel),
        Real(RealIptables),
    }

    impl Iptables for Target {
        async fn save(
            &mut self,
            family: IpFamily,
            table: &str,
        ) -> Result<String, kube_ipvs_proxy::kernel::KernelError> {
            match self {
                Target::Model(m) => m.save(family, table).await,
                Target::Real(r) => r.save(family, table).await,
            }
        }

        fn save_detached(
            &self,
            family: IpFamily,
            table: &str,
        ) -> impl Future<
            Output = Result<String, kube_ipvs_proxy::kernel::KernelError>,
        >
               + Send
               + 'static
               + use<> {
            match self {
                Target::Model(m) => futures::future::Either::Left(
                    m.save_detached(family, table),
                ),
                Target::Real(r) => futures::future::Either::Right(
                    r.save_detached(family, table),
                ),
            }
        }

        async fn restore(
            &mut self,
            family: IpFamily,
            payload: &str,
        ) -> Result<(), kube_ipvs_proxy::kernel::KernelError> {
            match self {
                Target::Model(m) => m.restore(family, payload).await,
                Target::Real(r) => r.restore(family, payload).await,
            }
        }
    }

    type Scenario = for<'a> fn(
        &'a mut Target,
        &'a RulesInput,
    ) -> std::pin::Pin<
        Box<dyn Future<Output = String> + 'a>,
    >;

    pub async fn contract_against_real_iptables() -> Result<()> {
        if env::var_os(IN_NETNS).is_none() {
            return in_fresh_netns("contract_against_real_iptables");
        }
        let variant = variant_from_env();
        create_sets()?;
        let mut real = RealIptables::new(variant);
        let ipvs_match = has_ipvs_match(&mut real).await;
        eprintln!(
            "iptables-{}: ipvs match {}",
            variant_name(variant),
            if ipvs_match { "present" } else { "absent" }
        );
        let inputs = rules_contract::inputs(ipvs_match);

        let scenarios: [(&str, Scenario); 3] = [
            ("apply_and_verify", |k, i| {
                Box::pin(rules_contract::apply_and_verify(k, i))
            }),
            ("repairs_drift", |k, i| {
                Box::pin(rules_contract::repairs_drift(k, i))
            }),
            ("cleanup_removes_only_ours", |k, i| {
                Box::pin(rules_contract::cleanup_removes_only_ours(k, i))
            }),
        ];
        // Every input through the main scenario; the others need one
        // input only, the one with every rule (the guest is slow).
        let widest = inputs.last().into_iter();
        let runs = inputs
            .iter()
            .map(|i| (i, scenarios.get(..1).unwrap_or_default()))
            .chain(widest.map(|i| (i, scenarios.get(1..).unwrap_or_default())));
        for ((input_name, input), scenarios) in runs {
            for &(scenario_name, scenario) in scenarios {
                let name = format!("{scenario_name} / {input_name}");
                both(variant, &name, |make| async move {
                    let mut k = make();
                    scenario(&mut k, input).await
                })
                .await?;
            }
        }
        for pair in inputs.windows(2) {
            if let [(a, from), (b, to)] = pair {
                let name = format!("change_input / {a} -> {b}");
                both(variant, &name, |make| async move {
                    let mut k = make();
                    rules_contract::change_input(&mut k, from, to).await
                })
                .await?;
            }
        }
        // iptables' own behaviour, which the model must share.
        for family in [IpFamily::V4, IpFamily::V6] {
            both(
                variant,
                "noflush_replaces_only_declared_chains",
                |make| async move {
                    let mut k = make();
                    contract::noflush_replaces_only_declared_chains(
                        &mut k, family,
                    )
                    .await
                },
            )
            .await?;
            both(
                variant,
                "failed_restore_changes_nothing",
                |make| async move {
                    let mut k = make();
                    contract::failed_restore_changes_nothing(&mut k, family)
                        .await
                },
            )
            .await?;
            both(variant, "refusals", |make| async move {
                let mut k = make();
                contract::refusals(&mut k, family).await
            })
            .await?;
        }
        Ok(())
    }
}
