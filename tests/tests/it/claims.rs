//! docs/claims.md lists each guarantee the docs make with the test that proves it: every
//! test it names must exist, so that renaming or removing one shows here.

use std::path::Path;

/// The (file, test) pairs of docs/claims.md's table: its last column, two code spans.
fn listed(claims: &str) -> Vec<(String, String)> {
    claims
        .lines()
        .filter(|line| line.starts_with("| ") && line.trim_end().ends_with("` |"))
        .filter_map(|line| {
            let last = line.trim_end().trim_end_matches('|').rsplit('|').next()?.trim();
            let spans: Vec<&str> = last.split('`').map(str::trim).filter(|s| !s.is_empty()).collect();
            match spans[..] {
                [file, test] => Some((file.to_owned(), test.to_owned())),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn every_listed_test_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let claims = std::fs::read_to_string(root.join("docs/claims.md")).expect("docs/claims.md");
    let tests = listed(&claims);
    assert!(tests.len() >= 20, "at least 20 guarantees, each with its test: {}", tests.len());
    let rows = claims
        .lines()
        .filter(|l| l.starts_with("| ") && l.split('|').nth(1).is_some_and(|n| n.trim().parse::<u32>().is_ok()))
        .count();
    assert_eq!(tests.len(), rows, "every guarantee names a file and a test");
    for (file, test) in tests {
        let source = std::fs::read_to_string(root.join(&file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(
            source.contains(&format!("fn {test}(")),
            "docs/claims.md names {test} in {file}, which has no such test"
        );
    }
}

#[test]
fn a_row_names_its_file_and_test() {
    let rows =
        "| 1 | fires | `tests/tests/it/pipeline.rs` `api_and_sql_timers_fire_once_each_on_time` |\n| 2 | no test |";
    assert_eq!(
        listed(rows),
        [("tests/tests/it/pipeline.rs".to_owned(), "api_and_sql_timers_fire_once_each_on_time".to_owned())]
    );
}
