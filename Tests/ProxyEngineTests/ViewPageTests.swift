import Foundation
import Testing

@testable import ProxyEngine

/// The live view's page as bytes (docs/view.md): what its Content-Security-Policy demands of it
/// (no inline script, no inline style, no event-handler attribute, no asset from elsewhere) and
/// the one rule of its script (record text never goes through an HTML parser). The page's
/// behaviour in a browser is Tests/Browser/view_test.py's (headless Chromium, `make test`).
@Suite("Live view: the page's bytes")
struct ViewPageTests {
    private let html = String(decoding: ViewPage.html, as: UTF8.self)
    private let css = String(decoding: ViewPage.css, as: UTF8.self)
    private let javascript = String(decoding: ViewPage.javascript, as: UTF8.self)

    @Test("the HTML links its stylesheet and script from the admin origin, and nothing inline")
    func htmlHasNothingInline() {
        #expect(html.hasPrefix("<!doctype html>"))
        #expect(html.contains(#"<link rel="stylesheet" href="/view/view.css">"#))
        #expect(html.contains(#"<script src="/view/view.js"></script>"#))
        // `script-src 'self'`: a script element with content would be refused (and is not wanted).
        #expect(html.components(separatedBy: "<script").count == 2)
        #expect(!html.contains("<style"))
        #expect(!html.contains("style="))
        #expect(html.range(of: #"\son[a-z]+\s*="#, options: .regularExpression) == nil)
        #expect(!html.contains("javascript:"))
    }

    @Test("no byte of the page names another origin: every request stays on the admin listener")
    func noExternalAsset() {
        for (name, text) in [("html", html), ("css", css), ("javascript", javascript)] {
            #expect(!text.contains("http://"), "\(name) names an http:// URL")
            #expect(!text.contains("https://"), "\(name) names an https:// URL")
            #expect(!text.contains("//cdn"), "\(name) names a CDN")
            #expect(!text.contains("@import"), "\(name) imports a stylesheet")
        }
        #expect(!css.contains("url("), "the stylesheet loads a resource")
        #expect(javascript.contains("new EventSource('/view/events')"))
    }

    @Test("the script never hands text to an HTML parser: records are attacker-controlled")
    func scriptUsesTextOnly() {
        for sink in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setTimeout('"] {
            #expect(!javascript.contains(sink), "the script uses \(sink)")
        }
        #expect(javascript.contains("textContent"))
        #expect(javascript.contains("history.replaceState"), "the token leaves the address bar")
    }

    @Test("dark and light: prefers-color-scheme and the toggle's attribute")
    func bothThemes() {
        #expect(css.contains("@media (prefers-color-scheme: dark)"))
        #expect(css.contains(#":root[data-theme="dark"]"#))
        #expect(css.contains(":focus-visible"))
    }
}
