//! A headless Chromium driven through chromedriver (Debian's packages, which
//! scripts/browser.sh installs), one per test: a driver of its own on a free port and a
//! fresh profile, both gone when the [`Browser`] is dropped. Accessibility is checked with
//! axe-core, whose script `make test` installs from the npm registry (pinned) and names in
//! `PUNCTUAL_TEST_AXE`.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, ClientBuilder, Locator};
use serde::Deserialize;
use serde_json::json;

pub use fantoccini::key::Key;

use crate::process::free_port;
use crate::unique_name;

pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
    profile: PathBuf,
}

/// One rule of axe-core that the page breaks.
#[derive(Debug, Deserialize)]
pub struct Violation {
    pub id: String,
    pub impact: Option<String>,
    pub help: String,
    pub targets: Vec<String>,
}

fn program(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

impl Browser {
    /// A browser window of `width` × `height` pixels.
    pub async fn start(width: u32, height: u32) -> Browser {
        let chromedriver = program("PUNCTUAL_TEST_CHROMEDRIVER", "/usr/bin/chromedriver");
        let chromium = program("PUNCTUAL_TEST_CHROMIUM", "/usr/bin/chromium");
        let port = free_port();
        let driver = tokio::process::Command::new(&chromedriver)
            .arg(format!("--port={port}"))
            // Times on the pages and in the inputs the tests fill: UTC, whatever the host's.
            .env("TZ", "UTC")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{chromedriver} did not start ({e}): run scripts/browser.sh tools"));
        let profile = std::env::temp_dir().join(unique_name("chromium-profile"));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("browserName".into(), json!("chrome"));
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--disable-background-networking", "--disable-component-update", "--no-first-run",
                         "--disable-sync", "--disable-quic", format!("--window-size={width},{height}"),
                         format!("--user-data-dir={}", profile.display())]
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        // The driver takes a moment to listen: a refused session is tried again.
        let last_error = RefCell::new(String::new());
        let connected = crate::eventually_or(Duration::from_secs(30), || async {
            match ClientBuilder::native().capabilities(capabilities.clone()).connect(&url).await {
                Ok(client) => Some(client),
                Err(e) => {
                    *last_error.borrow_mut() = e.to_string();
                    None
                }
            }
        })
        .await;
        let client = connected.unwrap_or_else(|| {
            panic!("no browser session from {chromedriver} with {chromium}: {}", last_error.borrow())
        });
        client
            .update_timeouts(TimeoutConfiguration::new(Some(Duration::from_secs(30)), None, None))
            .await
            .expect("timeouts set");
        Browser { client, driver, profile }
    }

    /// Waits for the element `css` to be there (10 s at most).
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page: {e}"))
    }

    /// Waits until `css` holds `text` (10 s at most) and returns its whole text.
    pub async fn find_text(&self, css: &str, text: &str) -> String {
        let seen = RefCell::new(String::new());
        let found = crate::eventually_or(Duration::from_secs(10), || async {
            let now = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            *seen.borrow_mut() = now.clone();
            now.contains(text).then_some(now)
        })
        .await;
        match found {
            Some(whole) => whole,
            None => {
                let page = match self.client.find(Locator::Css("body")).await {
                    Ok(body) => body.text().await.unwrap_or_default(),
                    Err(_) => String::new(),
                };
                panic!("{css} never held {text:?}; last: {:?}; the page:\n{page}", seen.borrow());
            }
        }
    }

    /// Clicks the button labelled `label` (waiting 10 s at most for it).
    pub async fn click_button(&self, label: &str) {
        let button = crate::eventually_or(Duration::from_secs(10), || async {
            for button in self.client.find_all(Locator::Css("button")).await.unwrap_or_default() {
                if button.text().await.unwrap_or_default() == label {
                    return Some(button);
                }
            }
            None
        })
        .await
        .unwrap_or_else(|| panic!("no button {label:?}"));
        button.click().await.expect("button clicked");
    }

    /// Types `text` into the input `css`, replacing what it held.
    pub async fn fill(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input.clear().await.expect("input cleared");
        input.send_keys(text).await.expect("text typed");
    }

    /// Sets the value of the input `css` as a script would, and lets the page know (an
    /// `input` event): for inputs typed into in a locale's format, such as dates.
    pub async fn set_value(&self, css: &str, value: &str) {
        self.find(css).await;
        self.client
            .execute(
                "const el = document.querySelector(arguments[0]); el.value = arguments[1];
                 el.dispatchEvent(new Event('input', { bubbles: true }));",
                vec![json!(css), json!(value)],
            )
            .await
            .expect("value set");
    }

    /// Waits until `css` is gone from the page or hidden (10 s at most).
    pub async fn gone(&self, css: &str) {
        let hidden = crate::eventually_or(Duration::from_secs(10), || async {
            let shown = match self.client.find(Locator::Css(css)).await {
                Ok(element) => element.is_displayed().await.unwrap_or(false),
                Err(_) => false,
            };
            (!shown).then_some(())
        })
        .await;
        assert!(hidden.is_some(), "{css} is still shown");
    }

    /// How many elements `css` matches now.
    pub async fn count(&self, css: &str) -> usize {
        self.client.find_all(Locator::Css(css)).await.map(|all| all.len()).unwrap_or(0)
    }

    /// The page as a PNG, written to `path`.
    pub async fn screenshot(&self, path: &std::path::Path) {
        let png = self.client.screenshot().await.expect("screenshot");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).expect("screenshot folder");
        }
        std::fs::write(path, png).expect("screenshot written");
    }

    /// The WCAG 2.x A and AA rules the page as it stands breaks, by axe-core.
    pub async fn accessibility_violations(&self) -> Vec<Violation> {
        let path = std::env::var("PUNCTUAL_TEST_AXE")
            .unwrap_or_else(|_| panic!("PUNCTUAL_TEST_AXE is not set: run the tests with `make test`"));
        let axe = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        self.client.execute(&axe, vec![]).await.expect("axe-core loaded");
        const RUN: &str = r#"
            const done = arguments[arguments.length - 1];
            axe.run(document, arguments[0])
              .then(r => done({ ok: true, violations: r.violations.map(v => ({
                  id: v.id, impact: v.impact, help: v.help, targets: v.nodes.map(n => n.target.join(' ')) })) }))
              .catch(e => done({ ok: false, error: String(e) }));"#;
        let options = json!({
            "runOnly": { "type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"] },
            "resultTypes": ["violations"]
        });
        let out = self.client.execute_async(RUN, vec![options]).await.expect("axe-core ran");
        assert_eq!(out["ok"], json!(true), "axe-core failed: {}", out["error"]);
        serde_json::from_value(out["violations"].clone()).expect("axe-core's violations")
    }
}

impl Browser {
    /// Ends the session, so that the driver quits the browser, then the driver, then the
    /// profile. A browser dropped without it (a test that failed) is killed with its
    /// driver, and its profile may stay behind in the temporary folder.
    pub async fn close(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(10), self.client.clone().close()).await;
        let _ = self.driver.kill().await;
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.start_kill();
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}
