//! `RestoreRequest::parse` on any bytes: never panics, and whatever parses is the canonical
//! form, byte for byte (so one request has exactly one spelling). A request of several
//! members (a set) is also what its members make: one to three, distinct subvolumes in the
//! layout's order, each line a request of one by itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = layout::RestoreRequest::parse(data) {
        let rendered = request.render();
        assert_eq!(rendered.as_bytes(), data, "a non-canonical request parsed");
        assert_eq!(
            layout::RestoreRequest::parse(rendered.as_bytes()),
            Ok(request.clone())
        );
        let members = request.members();
        assert!(
            (1..=layout::SubvolumeName::restorable().len()).contains(&members.len()),
            "{} members",
            members.len()
        );
        // Distinct, in the layout's order: the order the initrd exchanges them in.
        let order: Vec<usize> = members
            .iter()
            .map(|m| {
                layout::SUBVOLUMES
                    .iter()
                    .position(|row| row.name == m.subvolume().as_str())
                    .expect("a member names a layout subvolume")
            })
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "order {order:?}");
        assert_eq!(
            layout::RestoreRequest::new(members.iter().copied()),
            Ok(request.clone())
        );
        for m in members {
            assert_eq!(request.member(m.subvolume()), Some(m));
            let one = layout::RestoreRequest::from(*m);
            assert_eq!(
                layout::RestoreRequest::parse(one.render().as_bytes()),
                Ok(one)
            );
        }
    }
});
