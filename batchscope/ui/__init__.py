"""Page logic for the dashboard, kept out of pages/ so it is tested without a browser."""
