#!/usr/bin/env node
// Node (no proxy package) through scopeproxy's TLS client listener, showing the proxy a client
// certificate. Prints the status and the body. Args: URL PROXY_URL PROXY_CA CERT KEY [ORIGIN_CA]
// http:// URLs go to the proxy in absolute form over the TLS connection; https:// URLs open a
// CONNECT tunnel inside it and run their own TLS in the tunnel (TLS inside TLS).
const fs = require("fs"), http = require("http"), https = require("https"), net = require("net"), tls = require("tls");
const [url, proxyURL, proxyCA, cert, key, originCA] = process.argv.slice(2);
const target = new URL(url), proxy = new URL(proxyURL);
const proxyHost = proxy.hostname.replace(/^\[|\]$/g, "");
const toProxy = () => tls.connect({
  host: proxyHost, port: Number(proxy.port),
  servername: net.isIP(proxyHost) ? undefined : proxyHost,  // SNI carries names only
  ca: fs.readFileSync(proxyCA), cert: fs.readFileSync(cert), key: fs.readFileSync(key),
});
const print = (response) => {
  let body = "";
  response.setEncoding("utf8");
  response.on("data", (chunk) => (body += chunk));
  response.on("end", () => console.log(response.statusCode, body));
};
const fail = (error) => { console.error(error.message); process.exit(1); };

if (target.protocol === "http:") {
  http.get(url, { createConnection: toProxy, path: url }, print).on("error", fail);
} else {
  const authority = `${target.hostname}:${target.port || 443}`;
  const connect = http.request({ createConnection: toProxy, method: "CONNECT", path: authority, headers: { host: authority } });
  connect.on("connect", (response, socket) => {
    if (response.statusCode !== 200) fail(new Error(`CONNECT answered ${response.statusCode}`));
    const inner = () => tls.connect({ socket, servername: target.hostname, ca: originCA ? fs.readFileSync(originCA) : undefined });
    https.get(url, { createConnection: inner }, print).on("error", fail);
  });
  connect.on("error", fail);
  connect.end();
}
