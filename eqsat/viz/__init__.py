"""Looking at models: op histograms and rendered graphs of what changed."""
