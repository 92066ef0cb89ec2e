// Plain HTTP through scopeproxy with Node's built-in `http` module (works on any Node version, no
// package needed): connect to the proxy and send the absolute URL as the request path.
//   node node-http.js URL [PROXY]        PROXY defaults to http://127.0.0.1:8080
const http = require("http");

const target = new URL(process.argv[2]);
const proxy = new URL(process.argv[3] || "http://127.0.0.1:8080");

const request = http.request(
  { host: proxy.hostname, port: proxy.port, path: target.href, headers: { Host: target.host } },
  (response) => {
    let body = "";
    response.setEncoding("utf8");
    response.on("data", (chunk) => (body += chunk));
    response.on("end", () => console.log(response.statusCode, body));
  },
);
request.setTimeout(10000, () => request.destroy(new Error("timed out")));
request.on("error", (error) => { console.error(error.message); process.exitCode = 1; });
request.end();
