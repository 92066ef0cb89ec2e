// HTTPS through scopeproxy with Node's built-in modules (any Node version, no package needed):
// CONNECT through the proxy, then TLS inside the tunnel. Trust scopeproxy's local CA with
//   NODE_EXTRA_CA_CERTS=scopeproxy-ca.pem node node-https.js URL [PROXY]
// PROXY defaults to http://127.0.0.1:8080. The host must be one scopeproxy intercepts (tls.intercept).
const http = require("http");
const https = require("https");

const target = new URL(process.argv[2]);
const proxy = new URL(process.argv[3] || "http://127.0.0.1:8080");
const port = target.port || 443;

const connect = http.request({ host: proxy.hostname, port: proxy.port, method: "CONNECT", path: `${target.hostname}:${port}` });
connect.setTimeout(10000, () => connect.destroy(new Error("timed out")));
connect.on("error", (error) => { console.error(error.message); process.exitCode = 1; });
connect.on("connect", (response, socket) => {
  if (response.statusCode !== 200) {
    console.error("CONNECT answered", response.statusCode);
    socket.destroy();
    process.exitCode = 1;
    return;
  }
  // `socket`: the tunnel. `host` and `port` name the origin (TLS server name and Host header).
  const request = https.get(
    { host: target.hostname, port, path: target.pathname + target.search, socket, agent: false },
    (response) => {
      let body = "";
      response.setEncoding("utf8");
      response.on("data", (chunk) => (body += chunk));
      response.on("end", () => { console.log(response.statusCode, body); socket.destroy(); });
    },
  );
  request.on("error", (error) => { console.error(error.message); process.exitCode = 1; socket.destroy(); });
});
connect.end();
