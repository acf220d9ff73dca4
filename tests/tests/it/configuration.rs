//! docs/configuration.md is generated from the services' own settings (their clap
//! definitions: variable, default, help), so that it cannot drift from the code.
//! `PUNCTUAL_UPDATE_CONFIG_DOC=1 cargo nextest run -p punctual-e2e -E 'test(/^configuration::/)'`
//! writes it anew.

use std::collections::BTreeMap;
use std::path::Path;

use clap::CommandFactory;

/// One `PUNCTUAL_*` setting: its default, the services that read it, and what it does.
#[derive(Default)]
struct Setting {
    default: String,
    services: Vec<&'static str>,
    help: String,
}

fn cell(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "\\|")
}

fn reference() -> String {
    let mut settings: BTreeMap<String, Setting> = BTreeMap::new();
    let services = [
        ("admin", punctual_admin::AdminConfig::command()),
        ("scanner", punctual_scanner::ScannerConfig::command()),
        ("executor", punctual_executor::ExecutorConfig::command()),
    ];
    for (service, command) in services {
        for arg in command.get_arguments() {
            let Some(env) = arg.get_env() else { continue };
            let setting = settings.entry(env.to_string_lossy().into_owned()).or_default();
            if setting.services.is_empty() {
                setting.default =
                    arg.get_default_values().iter().map(|v| v.to_string_lossy()).collect::<Vec<_>>().join(",");
                setting.help = arg.get_long_help().or(arg.get_help()).map(|h| h.to_string()).unwrap_or_default();
            }
            setting.services.push(service);
        }
    }
    let mut text = String::from(
        "# Configuration\n\n\
         Every setting of the three services, from environment variables (or the same names as\n\
         `--flags`: `PUNCTUAL_SCAN_INTERVAL_MS` is `--scan-interval-ms`). Generated from the code's\n\
         definitions by `tests/tests/it/configuration.rs`, which fails when this page and the code\n\
         differ: do not edit it by hand.\n\n\
         | variable | default | read by | what it does |\n|---|---|---|---|\n",
    );
    for (name, s) in &settings {
        let default = if s.default.is_empty() { "—".to_owned() } else { format!("`{}`", cell(&s.default)) };
        text.push_str(&format!("| `{name}` | {default} | {} | {} |\n", s.services.join(", "), cell(&s.help)));
    }
    text
}

#[test]
fn the_configuration_reference_is_generated_from_the_services_settings() {
    let generated = reference();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/configuration.md");
    if std::env::var_os("PUNCTUAL_UPDATE_CONFIG_DOC").is_some() {
        std::fs::write(&path, &generated).expect("writing docs/configuration.md");
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/configuration.md differs from the services' settings: run PUNCTUAL_UPDATE_CONFIG_DOC=1 \
         cargo nextest run -p punctual-e2e -E 'test(/^configuration::/)', and commit it"
    );
    assert!(generated.matches("| `PUNCTUAL_").count() >= 40, "{generated}");
}
