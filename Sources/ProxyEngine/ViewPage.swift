/// The live decision view's page (docs/view.md): HTML, CSS and JavaScript compiled into the
/// binary, served by the admin listener at `/view`, `/view/view.css` and `/view/view.js`. No
/// external asset: the page's Content-Security-Policy lets it reach its own origin only.
enum ViewPage {
    static let html: [UInt8] = Array("<!doctype html><title>scopeproxy</title><p>view: not built yet</p>\n".utf8)
    static let css: [UInt8] = []
    static let javascript: [UInt8] = []
}
