#!/usr/bin/env python3
"""python-requests through scopeproxy's TLS client listener (an https:// proxy URL), showing the
proxy a client certificate. Prints the status and the body. Args: URL PROXY_URL PROXY_CA CERT KEY
[ORIGIN_CA]

requests has no option for the proxy's own TLS. For https:// URLs (a CONNECT tunnel inside the TLS
connection) urllib3 takes an SSLContext for it, `proxy_ssl_context`, which an adapter passes on. For
http:// URLs urllib3 sends the request to the proxy over an ordinary HTTPS connection that gets
requests' `cert=`, but that requests does not verify (it verifies only for https:// URLs)."""
import ssl, sys
import requests
from requests.adapters import HTTPAdapter

url, proxy, proxy_ca, cert, key = sys.argv[1:6]
origin_ca = sys.argv[6] if len(sys.argv) > 6 else True


class ProxyTLSAdapter(HTTPAdapter):
    def __init__(self, proxy_context, **kwargs):
        self.proxy_context = proxy_context
        super().__init__(**kwargs)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        proxy_kwargs["proxy_ssl_context"] = self.proxy_context
        return super().proxy_manager_for(proxy, **proxy_kwargs)


proxy_context = ssl.create_default_context(cafile=proxy_ca)
proxy_context.load_cert_chain(cert, key)
session = requests.Session()
session.mount("https://", ProxyTLSAdapter(proxy_context))
proxies = {"http": proxy, "https": proxy}
if url.startswith("https://"):
    response = session.get(url, proxies=proxies, verify=origin_ca, timeout=10)
else:
    response = session.get(url, proxies=proxies, cert=(cert, key), timeout=10)
print(response.status_code, response.text)
