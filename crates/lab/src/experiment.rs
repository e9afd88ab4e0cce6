//! TODO(lab helper): module doc.
