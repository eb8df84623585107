"""BatchScope's server: `streamlit run serve.py` serves app.py's pages, with deep links that connect at once.

app.py is the app (its pages, Streamlit's AppTest runs it alone); this file is only how it is served: as an
`st.App` whose index page tells the front end where the server is (batchscope/page_base.py says why).
"""
from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware

from batchscope.page_base import PageBaseMiddleware

app = st.App(Path(__file__).resolve().with_name("app.py"), middleware=[Middleware(PageBaseMiddleware)])
