"""Page logic for the dashboard, kept out of app_pages/ so it is tested without a browser."""
