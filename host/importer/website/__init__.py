"""A website as a source of writing: `polymath-host import https://site/` (or its `sitemap.xml`).

The crawl goes one way: `robots` says what the site allows, `sitemaps` lists the pages when the
site has a sitemap (an index too), else `links` follows each page's links; `addresses` keeps
every URL in one canonical form and within the site; `fetching` asks for each page politely
(requests at once, a delay between them, conditional on what the last run saw); `page_store`
keeps every answer in the import cache, so a re-run asks with ETag / Last-Modified and an
interrupted crawl continues where it stopped; `crawler` puts it together and counts what it
skipped. Each page's text is then read by the HTML reader, as a file's would be.
"""
