"""The JVM's evidence: thread dumps, class histograms and JFR recordings."""
